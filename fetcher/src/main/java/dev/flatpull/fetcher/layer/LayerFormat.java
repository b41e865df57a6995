package dev.flatpull.fetcher.layer;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.MediaTypes.LayerCompression;
import dev.flatpull.fetcher.oci.UnsupportedMediaTypeException;
import java.io.IOException;

/** How a layer can be read. */
public enum LayerFormat {
  /** eStargz: gzip members per file, a TOC vouched for by {@link #ESTARGZ_TOC_DIGEST}. */
  ESTARGZ,
  /** zstd:chunked: zstd frames per file, a TOC vouched for by {@link #ZSTD_CHUNKED_MANIFEST_CHECKSUM}. */
  ZSTD_CHUNKED,
  /** A plain tar (gzip, zstd or uncompressed): fetched whole, verified, and indexed locally. */
  PLAIN;

  public static final String ESTARGZ_TOC_DIGEST = "containerd.io/snapshot/stargz/toc.digest";
  public static final String ESTARGZ_UNCOMPRESSED_SIZE = "io.containers.estargz.uncompressed-size";
  /**
   * Where flatpull's converter put an eStargz layer's TOC, so that a reader fetches TOC and footer in one request
   * whatever the TOC's size (a TOC of 16 KiB chunks is about 1 MiB). A wrong value costs only a retry through the
   * footer: the TOC is verified against its digest either way.
   */
  public static final String ESTARGZ_TOC_OFFSET = "dev.flatpull.estargz.toc-offset";
  /**
   * The same offset and the blob's size ({@code OFFSET:SIZE}), as flatpull's converter writes them under the prefix
   * whose annotations containerd passes to a snapshotter as Prepare labels (with the TOC's digest, already under it):
   * the node starts fetching the TOC with the Prepare, before it has read the image's manifest. Only a hint: what it
   * brings is used once the manifest's own descriptor names the same digest, size and TOC digest.
   */
  public static final String ESTARGZ_TAIL_LABEL = "containerd.io/snapshot/flatpull/estargz.tail";
  public static final String ZSTD_CHUNKED_MANIFEST_CHECKSUM = "io.github.containers.zstd-chunked.manifest-checksum";
  public static final String ZSTD_CHUNKED_MANIFEST_POSITION = "io.github.containers.zstd-chunked.manifest-position";
  public static final String ZSTD_CHUNKED_TARSPLIT_CHECKSUM = "io.github.containers.zstd-chunked.tarsplit-checksum";
  public static final String ZSTD_CHUNKED_TARSPLIT_POSITION = "io.github.containers.zstd-chunked.tarsplit-position";
  /** The annotations of the first zstd:chunked version, still written by stargz-snapshotter's converter. */
  public static final String LEGACY_ZSTD_CHUNKED_MANIFEST_CHECKSUM = "io.containers.zstd-chunked.manifest-checksum";
  public static final String LEGACY_ZSTD_CHUNKED_MANIFEST_POSITION = "io.containers.zstd-chunked.manifest-position";

  /**
   * The format to read a layer in. A layer is lazily readable only when its descriptor carries the annotation that
   * lets its TOC be verified; without it, it is read as {@link #PLAIN}, since an unverifiable TOC must not be trusted.
   */
  public static LayerFormat of(Descriptor layer) throws UnsupportedMediaTypeException {
    LayerCompression c = MediaTypes.layerCompression(layer.mediaType());
    if (c == LayerCompression.GZIP && layer.annotations().containsKey(ESTARGZ_TOC_DIGEST)) {
      return ESTARGZ;
    }
    boolean current = layer.annotations().containsKey(ZSTD_CHUNKED_MANIFEST_CHECKSUM)
        && layer.annotations().containsKey(ZSTD_CHUNKED_MANIFEST_POSITION);
    boolean legacy = layer.annotations().containsKey(LEGACY_ZSTD_CHUNKED_MANIFEST_CHECKSUM)
        && layer.annotations().containsKey(LEGACY_ZSTD_CHUNKED_MANIFEST_POSITION);
    if (c == LayerCompression.ZSTD && (current || legacy)) {
      return ZSTD_CHUNKED;
    }
    return PLAIN;
  }

  /** The media type of a layer written in this format. */
  public String mediaType() {
    return switch (this) {
      case ESTARGZ -> MediaTypes.OCI_LAYER_GZIP;
      case ZSTD_CHUNKED -> MediaTypes.OCI_LAYER_ZSTD;
      case PLAIN -> throw new IllegalStateException("a plain layer may have any of the layer media types");
    };
  }

  /** The index of {@code layer} read from its TOC through {@code blob}, the TOC verified against its descriptor. */
  public LayerIndex readToc(Descriptor layer, BlobReader blob, FetchLimits limits) throws IOException {
    return switch (this) {
      case ESTARGZ -> EstargzToc.read(layer, blob, limits);
      case ZSTD_CHUNKED -> ZstdChunkedToc.read(layer, blob, limits);
      case PLAIN -> throw new IllegalArgumentException("layer " + layer.digest() + " has no TOC to index");
    };
  }
}
