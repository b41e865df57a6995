package dev.flatpull.it.bench;

import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * containerd's Snapshots API calls to flatpull's daemon during a start, from the daemon's
 * {@code flatpull_snapshots_calls_seconds{method}} before and after: how many of each and how long the daemon took to
 * answer them, the part of the create phase (and of the pull) that is the daemon's own.
 */
final class SnapshotsCalls {
  private static final Pattern COUNT = Pattern.compile(
      "flatpull_snapshots_calls_seconds_count\\{method=\"([A-Za-z]+)\"}");

  private SnapshotsCalls() {}

  /** One line: each method's calls and milliseconds between the two scrapes, and their sum. */
  static String between(Map<String, Double> before, Map<String, Double> after) {
    Map<String, double[]> byMethod = new TreeMap<>();
    for (Map.Entry<String, Double> e : after.entrySet()) {
      Matcher m = COUNT.matcher(e.getKey());
      if (!m.matches()) {
        continue;
      }
      String method = m.group(1);
      double calls = e.getValue() - before.getOrDefault(e.getKey(), 0.0);
      String sum = "flatpull_snapshots_calls_seconds_sum{method=\"" + method + "\"}";
      double seconds = after.getOrDefault(sum, 0.0) - before.getOrDefault(sum, 0.0);
      if (calls > 0) {
        byMethod.put(method, new double[] {calls, seconds * 1e3});
      }
    }
    StringBuilder b = new StringBuilder("Snapshots API calls answered by the daemon:");
    double total = 0;
    for (Map.Entry<String, double[]> e : byMethod.entrySet()) {
      b.append(String.format(Locale.ROOT, " %s %d in %.1f ms,", e.getKey(), (long) e.getValue()[0], e.getValue()[1]));
      total += e.getValue()[1];
    }
    return b.append(String.format(Locale.ROOT, " %.1f ms in all", total)).toString();
  }
}
