package dev.flatpull.config;

import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
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
 * @param fuseManagerJavaOptions the JVM options the daemon starts the FUSE manager with
 * @param warmUp whether each process runs the cold-start path on a synthetic image before it serves (the daemon a
 *     remote Prepare and containerd's calls around it, the FUSE manager its service, TOC parser and read path), so
 *     that a node's first remote Prepare is not paid in class loading and interpreted code; it delays serving by
 *     seconds (docs/configuration.md has the figures)
 * @param requireTarSplit whether a layer is served lazily only when its TOC was checked against a tar-split verified
 *     by its digest (zstd:chunked from containers/storage 1.47 on, and flatpull's converter), so that its files'
 *     metadata is what an ordinary pull would unpack; containers/storage's own partial pulls refuse the others. Off by
 *     default: Debian 12's podman, buildah and skopeo (containers/storage 1.43) write no tar-split, and eStargz has
 *     none. A refused layer is pulled whole.
 * @param classArchiveAfter how long after the daemon starts it trains the FUSE managers' class-data archive, when
 *     warm-ups are on and the archive is missing (once per build): late enough that a node's first cold starts do not
 *     share the machine, and the memory group, with the training's JVM
 */
public record SnapshotterSettings(
    Path socket, Path fuseManagerSocket, Optional<InetSocketAddress> metricsAddress,
    Optional<InetSocketAddress> fuseManagerMetricsAddress, boolean prefetch, boolean backgroundFetch,
    Duration backgroundFetchQuiet, List<String> fuseManagerJavaOptions, boolean warmUp,
    boolean requireTarSplit, Duration classArchiveAfter) {
  /**
   * A young generation large enough for a cold start: with the heap the JVM sized after the warm-up's collection
   * (about 50 MB of eden), the FUSE manager collected two or three times while a service started (pauses of 5-31 ms on
   * 2 cores, every FUSE operation waiting). A start of nginx allocates about 100 MB there, one of python about 250 MB;
   * 256 MB still collected inside python's start, and 512 MB gave the times of 384 MB for 130 MiB more resident
   * memory (docs/benchmarks.md). G1 is named because under a memory limit below about 1.8 GiB the JVM takes the serial
   * collector and a heap of a quarter of the limit, with which that young generation failed the warm-up; elsewhere it
   * is what the JVM picks anyway. A heap that shrinks when idle held 55-64 % less but made lazy starts 9-14 % slower,
   * and a ceiling of 60 % of the limit instead of a quarter held 50-60 % more for the same times (docs/benchmarks.md,
   * "Memory"): neither is the default. Nor Shenandoah's footprint heuristics, which held 44-57 % less and made starts
   * 0-14 % slower (docs/benchmarks.md, "Memory: Shenandoah's footprint heuristics").
   *
   * <p>C1 alone ({@code -XX:TieredStopAtLevel=1}): C2 spent 0.2-0.9 s of the manager's CPU inside each cold start
   * recompiling what the start made hot, on the two cores the service starts on, and its one gain, the SHA-256
   * intrinsic, libcrypto's SHA-256 gives from the first call (the manager installs it). Against C2, one run: lazy
   * starts 0.82-0.94x, runtime-image starts 0.69-1.10x, a just-booted manager's 0.64-0.72x (docs/benchmarks.md, "The
   * FUSE manager with C1 alone").
   */
  public static final List<String> FUSE_MANAGER_JAVA_OPTIONS =
      List.of("-XX:+UseG1GC", "-Xmn384m", "-XX:TieredStopAtLevel=1");

  public static final SnapshotterSettings DEFAULTS = new SnapshotterSettings(
      Path.of("/run/flatpull/flatpull.sock"), Path.of("/run/flatpull/fuse-manager.sock"), Optional.empty(),
      Optional.empty(), true, true, Duration.ofSeconds(2), FUSE_MANAGER_JAVA_OPTIONS, true, false,
      Duration.ofMinutes(5));

  public SnapshotterSettings {
    Objects.requireNonNull(socket);
    Objects.requireNonNull(fuseManagerSocket);
    Objects.requireNonNull(metricsAddress);
    Objects.requireNonNull(fuseManagerMetricsAddress);
    Objects.requireNonNull(backgroundFetchQuiet);
    Objects.requireNonNull(classArchiveAfter);
    if (classArchiveAfter.isNegative()) {
      throw new IllegalArgumentException("class_archive_after is negative: " + classArchiveAfter);
    }
    fuseManagerJavaOptions = List.copyOf(fuseManagerJavaOptions);
    if (backgroundFetchQuiet.isNegative()) {
      throw new IllegalArgumentException("background_fetch_quiet is negative: " + backgroundFetchQuiet);
    }
  }

  /**
   * The FUSE manager's heap ceiling as its options set it ({@code -Xmx} or {@code -XX:MaxHeapSize=}, the last one
   * wins, as in the JVM); empty when they leave it to the JVM.
   */
  public java.util.OptionalLong fuseManagerHeapCeiling() {
    java.util.OptionalLong ceiling = java.util.OptionalLong.empty();
    for (String o : fuseManagerJavaOptions) {
      String size = o.startsWith("-Xmx") ? o.substring(4)
          : o.startsWith("-XX:MaxHeapSize=") ? o.substring("-XX:MaxHeapSize=".length()) : null;
      if (size != null) {
        ceiling = jvmSize(size).map(java.util.OptionalLong::of).orElse(ceiling);
      }
    }
    return ceiling;
  }

  /** A JVM size ({@code 1g}, {@code 768M}, {@code 1073741824}); empty if it is not one (the JVM will say so). */
  private static Optional<Long> jvmSize(String s) {
    if (s.isEmpty()) {
      return Optional.empty();
    }
    int shift = switch (Character.toLowerCase(s.charAt(s.length() - 1))) {
      case 'k' -> 10;
      case 'm' -> 20;
      case 'g' -> 30;
      case 't' -> 40;
      default -> 0;
    };
    String digits = shift == 0 ? s : s.substring(0, s.length() - 1);
    try {
      long n = Long.parseLong(digits);
      return n < 0 || n > (Long.MAX_VALUE >> shift) ? Optional.empty() : Optional.of(n << shift);
    } catch (NumberFormatException e) {
      return Optional.empty();
    }
  }

  /**
   * Where the daemon holds the FUSE manager's mounts' devices, so that mounts outlive a manager that dies: beside the
   * manager's socket, as reachable (root only).
   */
  public Path fuseDevicesSocket() {
    return fuseManagerSocket.resolveSibling("fuse-devices.sock");
  }

  public SnapshotterSettings withFetching(boolean prefetchLandmarks, boolean background) {
    return new SnapshotterSettings(socket, fuseManagerSocket, metricsAddress, fuseManagerMetricsAddress,
        prefetchLandmarks, background, backgroundFetchQuiet, fuseManagerJavaOptions, warmUp, requireTarSplit,
        classArchiveAfter);
  }
}
