package dev.flatpull.snapshotter.overlay;

import java.time.Duration;
import java.util.List;

/**
 * What the snapshotter measures, for the metrics package to export ({@link SnapshotterCounters} counts it in memory).
 * Implementations must be fast and thread-safe.
 */
public interface SnapshotterMetrics {
  /** Every reason a layer asked for remotely is downloaded instead: a bounded set, so that it can tag metrics. */
  List<String> FALLBACK_REASONS = List.of("malformed_labels", "registry_unreachable", "layer_not_in_manifest",
      "plain_layer", "unsupported_media_type", "mount_failed");

  /** A layer is served lazily. */
  default void remoteSnapshot() {}

  /** A layer asked for remotely is downloaded, for {@code reason} (one of {@link #FALLBACK_REASONS}). */
  default void fallback(String reason) {}

  /**
   * The daemon's part of a remote Prepare: from its arrival to the layer's manifest being known, and from there to
   * the mount returning.
   */
  default void remotePrepared(Duration manifest, Duration mount) {}

  /** A snapshot was removed. */
  default void removal() {}

  default void deletionStarted() {}

  default void deletionFinished(long nanos) {}
}
