package dev.flatpull.manager;

import dev.flatpull.runtimeimage.RuntimeImageStream;
import java.time.Duration;
import java.util.Optional;

/**
 * What the FUSE manager measures of cold starts, for the metrics package to export (the only user of a metrics
 * library). Tag values are bounded: never a digest or a path. Implementations must be fast and thread-safe.
 */
public interface RemoteLayerMetrics {
  RemoteLayerMetrics NONE = new RemoteLayerMetrics() {};

  /** Where served content came from: {@code runtime_image}, {@code lazy} (fetched on demand) or {@code cache}. */
  default void contentServed(String source, long bytes) {}

  /**
   * A FUSE operation of a served layer failed (the kernel got an error, the reader EIO): {@code cause} is
   * {@code verification} (fetched bytes did not match their digest), {@code registry} (the registry could not be had)
   * or {@code other}.
   */
  default void operationFailed(String operation, String cause) {}

  /**
   * A layer's TOC opened with its Prepare, before the manifest was read, ended: {@code used} by the layer's mount,
   * or dropped because the manifest described the layer otherwise ({@code differs}) or nobody asked for it in time
   * ({@code expired}).
   */
  default void tocExpected(String result) {}

  /** One layer mounted: TOC fetched and verified, tree built, mounted. */
  default void layerMounted(Duration toc, Duration tree, Duration mount) {}

  /** The first byte a container read of an image, this long after its first layer was asked for. */
  default void firstByte(Duration sinceMountRequested) {}

  /**
   * The runtime-image lookup of an image ended: {@code result} is {@code loaded} (it brought content, perhaps not all),
   * {@code borrowed} (another version's, re-pointed at this image, brought content),
   * or why none was used (a selection reason such as {@code none_found}, or {@code lookup_failed}, {@code malformed},
   * {@code mismatch}, {@code over_limit}, {@code stream_failed}, {@code disabled}).
   */
  default void runtimeImageLookup(String result) {}

  /**
   * A runtime image hit one of the limits its image sets ({@code index_size}, {@code blob_size}, {@code frame_size},
   * {@code working_set}: refused whole) or carried frames without extents ({@code frame_without_extent}: those were
   * not fetched, {@code count} of them).
   */
  default void runtimeImageLimit(String limit, long count) {}

  /**
   * Pages of arriving runtime-image content pushed into the kernel's page cache ({@code stored}), or not, because the
   * kernel did not know the file or the mount's engine cannot ({@code missed}).
   */
  default void kernelPagesStored(long stored, long missed) {}

  /**
   * An image without a runtime image of its own borrowed another version's: {@code bytes} of its content kept, the
   * image having {@code overlap} (0 to 1) of its bytes.
   */
  default void runtimeImageBorrowed(long bytes, double overlap) {}

  /** A listed runtime image was not chosen: {@code reason} is {@code other_verification}, {@code other_service} or {@code older}. */
  default void runtimeImagePassedOver(String reason) {}

  /**
   * A runtime image was streamed.
   *
   * @param traceAge how old its trace was, when the artifact says
   */
  default void runtimeImageStreamed(RuntimeImageStream.Outcome outcome, Duration took, Optional<Duration> traceAge) {}

  /**
   * A layer's content became local (background fetch) and its diff_id was checked: {@code result} is {@code match},
   * {@code mismatch} (the config names another tar stream than the layer holds), {@code unverifiable} (no tar-split to
   * rebuild the stream from) or {@code failed}.
   */
  default void diffIdChecked(String result) {}
}
