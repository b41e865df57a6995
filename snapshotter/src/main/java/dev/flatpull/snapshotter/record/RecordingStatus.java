package dev.flatpull.snapshotter.record;

import java.time.Duration;
import java.util.Locale;
import java.util.Optional;

/**
 * The state of a recording run while it waits (for the pull, for the probes): how long, and what the FUSE manager
 * fetched from the registry meanwhile, counted from the run's start, with the rate and the time left before the
 * probes give up. There is no total to count down to: a service is ready when its probes say so.
 */
final class RecordingStatus {
  private final long startNanos;
  private final long startBytes;
  private final long startRequests;

  /** A run that starts at {@code nanos}, when the manager had fetched {@code bytes} in {@code requests}. */
  RecordingStatus(long nanos, long bytes, long requests) {
    this.startNanos = nanos;
    this.startBytes = bytes;
    this.startRequests = requests;
  }

  /**
   * "run 1/2: waiting for 1 probe, 4.2 s: 12.4 MiB fetched in 34 requests, 2.9 MiB/s; gives up in 1 min 55 s".
   *
   * @param bytes what the manager had fetched at {@code nanos}, in all
   * @param givesUpIn how long before the wait gives up, when it does
   */
  String line(String phase, long nanos, long bytes, long requests, Optional<Duration> givesUpIn) {
    long elapsed = Math.max(0, nanos - startNanos);
    long fetched = Math.max(0, bytes - startBytes);
    StringBuilder b = new StringBuilder(String.format(Locale.ROOT, "%s, %.1f s: %.1f MiB fetched in %d request%s",
        phase, elapsed / 1e9, fetched / 1048576.0, requests - startRequests, requests - startRequests == 1 ? "" : "s"));
    if (elapsed > 0 && fetched > 0) {
      b.append(String.format(Locale.ROOT, ", %.1f MiB/s", fetched * 1e9 / elapsed / 1048576.0));
    }
    givesUpIn.ifPresent(d -> b.append("; gives up in ").append(duration(Math.max(0, d.toSeconds()))));
    return b.toString();
  }

  private static String duration(long seconds) {
    return seconds < 60 ? seconds + " s" : String.format(Locale.ROOT, "%d min %02d s", seconds / 60, seconds % 60);
  }
}
