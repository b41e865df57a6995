package dev.flatpull.fetcher.oci;

import java.util.List;

/** The media types of OCI and Docker schema 2 documents and layers that flatpull understands. */
public final class MediaTypes {
  public static final String OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
  public static final String OCI_INDEX = "application/vnd.oci.image.index.v1+json";
  public static final String OCI_CONFIG = "application/vnd.oci.image.config.v1+json";
  public static final String OCI_LAYER = "application/vnd.oci.image.layer.v1.tar";
  public static final String OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip";
  public static final String OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd";
  public static final String OCI_LAYER_NONDIST_GZIP = "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip";
  /** The OCI empty descriptor's media type ({@code {}}, the config of an artifact without one). */
  public static final String OCI_EMPTY = "application/vnd.oci.empty.v1+json";
  public static final String DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json";
  public static final String DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json";
  public static final String DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json";
  public static final String DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip";
  public static final String DOCKER_LAYER_FOREIGN_GZIP = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";

  /** The {@code Accept} list for manifest requests, most specific first. */
  public static final List<String> MANIFEST_ACCEPT =
      List.of(OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST);

  private MediaTypes() {}

  public static boolean isIndex(String mediaType) {
    return OCI_INDEX.equals(mediaType) || DOCKER_MANIFEST_LIST.equals(mediaType);
  }

  public static boolean isManifest(String mediaType) {
    return OCI_MANIFEST.equals(mediaType) || DOCKER_MANIFEST.equals(mediaType);
  }

  /** The compression of a layer media type. */
  public static LayerCompression layerCompression(String mediaType) throws UnsupportedMediaTypeException {
    return switch (mediaType) {
      case OCI_LAYER, "application/vnd.docker.image.rootfs.diff.tar" -> LayerCompression.NONE;
      case OCI_LAYER_GZIP, OCI_LAYER_NONDIST_GZIP, DOCKER_LAYER_GZIP, DOCKER_LAYER_FOREIGN_GZIP ->
          LayerCompression.GZIP;
      case OCI_LAYER_ZSTD, "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" -> LayerCompression.ZSTD;
      default -> throw new UnsupportedMediaTypeException("layer", mediaType);
    };
  }

  /** How a layer blob is compressed. */
  public enum LayerCompression {
    NONE,
    GZIP,
    ZSTD
  }
}
