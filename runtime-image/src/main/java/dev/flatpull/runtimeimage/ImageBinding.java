package dev.flatpull.runtimeimage;

import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A runtime image checked against the image it claims to belong to, and the digest each of its extents must hash to
 * before it may be served. Binding refuses a runtime image built for another manifest, one naming a layer the
 * manifest does not have, a file the layer does not have (or that is not a regular file), content beyond a file's
 * end, and, in the default mode, an extent that is not exactly a chunk of the layer's TOC with that chunk's digest.
 * So whatever the runtime image holds, flatpull never serves a byte at a (layer, file, offset) the image does not
 * have, and in the default mode never a byte the image's own digests do not vouch for. Immutable.
 */
public final class ImageBinding {
  private final RuntimeImageIndex index;
  private final Digest[][] expected;

  private ImageBinding(RuntimeImageIndex index, Digest[][] expected) {
    this.index = index;
    this.expected = expected;
  }

  /**
   * Binds {@code index} to {@code manifest}, whose layers' verified indexes {@code layers} holds (keyed by layer
   * digest; every layer the runtime image names must be there).
   *
   * @throws RuntimeImageMismatchException naming the field and the reason
   */
  public static ImageBinding bind(RuntimeImageIndex index, ImageManifest manifest, Map<Digest, LayerIndex> layers)
      throws RuntimeImageMismatchException {
    if (!index.manifestDigest().equals(manifest.digest())) {
      throw new RuntimeImageMismatchException("index.service.manifestDigest: built for manifest "
          + index.manifestDigest() + ", but the image is " + manifest.digest());
    }
    List<Digest> imageLayers = manifest.layers().stream().map(Descriptor::digest).toList();
    Digest[][] expected = new Digest[index.layers().size()][];
    for (int i = 0; i < index.layers().size(); i++) {
      LayerExtents l = index.layers().get(i);
      String where = "index.layers[" + i + "]";
      if (!imageLayers.contains(l.digest())) {
        throw new RuntimeImageMismatchException(where + ".digest: layer " + l.digest() + " is not in image manifest "
            + manifest.digest());
      }
      LayerIndex layer = layers.get(l.digest());
      if (layer == null) {
        throw new IllegalArgumentException("no index given for layer " + l.digest());
      }
      expected[i] = new Digest[l.extents().size()];
      LayerEntry[] files = new LayerEntry[l.files().size()];
      for (int j = 0; j < l.extents().size(); j++) {
        Extent e = l.extents().get(j);
        String at = where + ".extents[" + j + "]";
        LayerEntry file = files[e.file()];
        if (file == null) {
          file = regularFile(layer, l.files().get(e.file()), at, l.digest());
          files[e.file()] = file;
        }
        if (e.fileEnd() > file.size()) {
          throw new RuntimeImageMismatchException(at + ": bytes [" + e.fileOffset() + ", " + e.fileEnd() + ") of "
              + l.files().get(e.file()) + " lie beyond its end (" + file.size() + " bytes in layer " + l.digest() + ")");
        }
        expected[i][j] = index.verify() == Verification.IMAGE
            ? chunkDigest(file, e, at, l.files().get(e.file()), l.digest())
            : pageDigest(file, e, at, l.files().get(e.file()));
      }
    }
    return new ImageBinding(index, expected);
  }

  private static LayerEntry regularFile(LayerIndex layer, String path, String at, Digest digest)
      throws RuntimeImageMismatchException {
    Optional<LayerEntry> entry = layer.entry(path);
    LayerEntry content = entry.map(layer::contentOf).orElse(null);
    if (content == null || content.type() != EntryType.REG) {
      throw new RuntimeImageMismatchException(at + ": " + path + " is not a regular file of layer " + digest);
    }
    return content;
  }

  private static Digest chunkDigest(LayerEntry file, Extent e, String at, String path, Digest layer)
      throws RuntimeImageMismatchException {
    List<LayerChunk> covering = LazyLayer.covering(file, e.fileOffset(), 1);
    LayerChunk c = covering.isEmpty() ? null : covering.get(0);
    if (c == null || c.fileOffset() != e.fileOffset() || c.size() != e.length() || !c.digest().equals(e.digest())) {
      throw new RuntimeImageMismatchException(at + ": [" + e.fileOffset() + ", " + e.fileEnd() + ") of " + path
          + " with digest " + e.digest() + " is not a chunk of layer " + layer
          + (c == null ? "" : " (its chunk there is [" + c.fileOffset() + ", " + c.fileEnd() + ") " + c.digest() + ")"));
    }
    return c.digest();
  }

  private static Digest pageDigest(LayerEntry file, Extent e, String at, String path)
      throws RuntimeImageMismatchException {
    long whole = Math.min(RuntimeImageFormat.PAGE_SIZE, file.size() - e.fileOffset());
    if (e.length() != whole) {
      throw new RuntimeImageMismatchException(at + ": page at " + e.fileOffset() + " of " + path + " holds "
          + e.length() + " bytes, the file has " + whole + " there");
    }
    return e.digest();
  }

  public RuntimeImageIndex index() {
    return index;
  }

  /** What extent {@code extent} of layer {@code layer} (indexes into the runtime image's index) must hash to. */
  public Digest expected(int layer, int extent) {
    return expected[layer][extent];
  }
}
