package dev.flatpull.config;

import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Objects;
import java.util.Optional;

/**
 * The containerd snapshotter daemon ({@code flatpull serve}).
 *
 * @param socket the unix socket containerd's {@code proxy_plugins} entry points at
 * @param fuseManagerSocket the unix socket of the FUSE manager, the process that serves lazily pulled layers and
 *     outlives restarts of the daemon
 * @param metricsAddress where the daemon serves its Prometheus metrics over HTTP; empty for none
 * @param fuseManagerMetricsAddress where the FUSE manager serves its own (reads, registry traffic, page cache, runtime
 *     images, cold-start timeline); empty for none
 * @param prefetch whether a newly mounted layer fetches its prioritized (landmark) files at once
 * @param backgroundFetch whether a mounted layer then fetches the rest of its content in the background, pausing while
 *     reads wait
 * @param backgroundFetchQuiet how long on-demand reads must have left the registry alone before background fetching
 *     starts or resumes: while a service starts, its misses come every few milliseconds, and a link shared with
 *     background batches made them slower and moved tens of megabytes before it was ready
 */
public record SnapshotterSettings(
    Path socket, Path fuseManagerSocket, Optional<InetSocketAddress> metricsAddress,
    Optional<InetSocketAddress> fuseManagerMetricsAddress, boolean prefetch, boolean backgroundFetch,
    Duration backgroundFetchQuiet) {
  public static final SnapshotterSettings DEFAULTS = new SnapshotterSettings(
      Path.of("/run/flatpull/flatpull.sock"), Path.of("/run/flatpull/fuse-manager.sock"), Optional.empty(),
      Optional.empty(), true, true, Duration.ofSeconds(2));

  public SnapshotterSettings {
    Objects.requireNonNull(socket);
    Objects.requireNonNull(fuseManagerSocket);
    Objects.requireNonNull(metricsAddress);
    Objects.requireNonNull(fuseManagerMetricsAddress);
    Objects.requireNonNull(backgroundFetchQuiet);
    if (backgroundFetchQuiet.isNegative()) {
      throw new IllegalArgumentException("background_fetch_quiet is negative: " + backgroundFetchQuiet);
    }
  }

  public SnapshotterSettings withFetching(boolean prefetchLandmarks, boolean background) {
    return new SnapshotterSettings(socket, fuseManagerSocket, metricsAddress, fuseManagerMetricsAddress,
        prefetchLandmarks, background, backgroundFetchQuiet);
  }
}
