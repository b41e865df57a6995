package dev.flatpull.it.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import org.junit.jupiter.api.Test;

class GcPausesTest {
  @Test
  void pausesBetweenTwoScrapes_overEveryCollectorAndCause() {
    String young = "{action=\"end of minor GC\",cause=\"G1 Evacuation Pause\",gc=\"G1 Young Generation\"}";
    String remark = "{action=\"end of major GC\",cause=\"G1 Remark\",gc=\"G1 Old Generation\"}";
    Map<String, Double> before = Map.of(
        "jvm_gc_pause_seconds_count" + young, 10.0,
        "jvm_gc_pause_seconds_sum" + young, 0.200);
    Map<String, Double> after = Map.of(
        "jvm_gc_pause_seconds_count" + young, 12.0,
        "jvm_gc_pause_seconds_sum" + young, 0.2231,
        "jvm_gc_pause_seconds_count" + remark, 1.0,
        "jvm_gc_pause_seconds_sum" + remark, 0.004,
        "jvm_gc_pause_seconds_max" + young, 0.015);
    assertEquals("FUSE manager's collections in the start: 3, 27.1 ms paused", GcPauses.between("FUSE manager's", before, after));
  }
}
