package dev.flatpull.it.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import org.junit.jupiter.api.Test;

class SnapshotsCallsTest {
  @Test
  void callsBetweenTwoScrapes_byMethod_withTheirMilliseconds() {
    Map<String, Double> before = Map.of(
        "flatpull_snapshots_calls_seconds_count{method=\"Prepare\"}", 3.0,
        "flatpull_snapshots_calls_seconds_sum{method=\"Prepare\"}", 0.010,
        "flatpull_snapshots_calls_seconds_count{method=\"Stat\"}", 5.0,
        "flatpull_snapshots_calls_seconds_sum{method=\"Stat\"}", 0.002);
    Map<String, Double> after = Map.of(
        "flatpull_snapshots_calls_seconds_count{method=\"Prepare\"}", 4.0,
        "flatpull_snapshots_calls_seconds_sum{method=\"Prepare\"}", 0.0131,
        "flatpull_snapshots_calls_seconds_count{method=\"Stat\"}", 5.0,
        "flatpull_snapshots_calls_seconds_sum{method=\"Stat\"}", 0.002,
        "flatpull_snapshots_calls_seconds_count{method=\"Mounts\"}", 2.0,
        "flatpull_snapshots_calls_seconds_sum{method=\"Mounts\"}", 0.0015,
        "flatpull_snapshots_calls_seconds_max{method=\"Mounts\"}", 0.001);
    assertEquals("Snapshots API calls answered by the daemon: Mounts 2 in 1.5 ms, Prepare 1 in 3.1 ms, 4.6 ms in all",
        SnapshotsCalls.between(before, after));
  }
}
