package dev.flatpull.it.bench;

import dev.flatpull.it.MetricsEndpoint;
import java.util.Locale;
import java.util.Map;

/**
 * A process's collections during a start, from its {@code jvm_gc_pause_seconds} before and after: every FUSE request
 * waits while one of the FUSE manager's runs, and a Snapshots API call while one of the daemon's does, so a collection
 * inside a start is time the service sees.
 */
final class GcPauses {
  private static final String COUNT = "jvm_gc_pause_seconds_count";
  private static final String SUM = "jvm_gc_pause_seconds_sum";

  private GcPauses() {}

  /** One line: how many collections paused {@code process} between the two scrapes, and for how long in all. */
  static String between(String process, Map<String, Double> before, Map<String, Double> after) {
    double count = MetricsEndpoint.sum(after, COUNT) - MetricsEndpoint.sum(before, COUNT);
    double millis = (MetricsEndpoint.sum(after, SUM) - MetricsEndpoint.sum(before, SUM)) * 1e3;
    return String.format(Locale.ROOT, "%s collections in the start: %d, %.1f ms paused", process, Math.round(count),
        millis);
  }
}
