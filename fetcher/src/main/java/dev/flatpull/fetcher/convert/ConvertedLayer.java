package dev.flatpull.fetcher.convert;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.oci.Descriptor;
import java.nio.file.Path;
import java.util.Map;

/**
 * A layer written in a lazy format.
 *
 * @param format the lazy format it was written in
 * @param blob the file holding the compressed layer
 * @param diffId digest of the uncompressed tar stream, for the image config's {@code rootfs.diff_ids}
 * @param annotations what the layer descriptor must carry (TOC digest and position)
 */
public record ConvertedLayer(
    LayerFormat format, Path blob, Digest digest, long size, Digest diffId, long uncompressedSize, Digest tocDigest,
    Map<String, String> annotations, int entries, int chunks) {
  /** The descriptor an image's manifest gives this layer. */
  public Descriptor descriptor() {
    return new Descriptor(format.mediaType(), digest, size, annotations);
  }
}
