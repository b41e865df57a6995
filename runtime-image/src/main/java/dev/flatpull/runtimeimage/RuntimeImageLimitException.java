package dev.flatpull.runtimeimage;

/**
 * A runtime image that asks more of a node than the image it belongs to allows (docs/runtime-images.md, "Limits"):
 * an index larger than the image's TOCs can need, a blob longer than its index, a frame larger than the extents it
 * carries, or more of the image than a start-up working set. The message names the bound and the setting.
 */
public final class RuntimeImageLimitException extends RuntimeImageFormatException {
  private static final long serialVersionUID = 1L;

  /** Every limit, as bounded metric labels. */
  public static final java.util.List<String> LIMITS = java.util.List.of("index_size", "blob_size", "frame_size",
      "working_set");

  private final String limit;

  /** @param limit which bound was hit, one of {@link #LIMITS} */
  public RuntimeImageLimitException(String limit, String message) {
    super(message);
    if (!LIMITS.contains(limit)) {
      throw new IllegalArgumentException("unknown limit " + limit);
    }
    this.limit = limit;
  }

  /** Which bound was hit, one of {@link #LIMITS}. */
  public String limit() {
    return limit;
  }
}
