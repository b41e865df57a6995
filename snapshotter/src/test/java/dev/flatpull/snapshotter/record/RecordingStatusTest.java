package dev.flatpull.snapshotter.record;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class RecordingStatusTest {
  private static final long SECOND = 1_000_000_000L;
  private static final long MIB = 1 << 20;

  @Test
  void line_countsFromTheRunsStart_withRateAndTimeBeforeTheProbesGiveUp() {
    RecordingStatus s = new RecordingStatus(10 * SECOND, 100 * MIB, 40);

    assertEquals("run 1/2: waiting for 1 probe, 4.0 s: 12.0 MiB fetched in 34 requests, 3.0 MiB/s; gives up in"
        + " 1 min 56 s", s.line("run 1/2: waiting for 1 probe", 14 * SECOND, 112 * MIB, 74,
        Optional.of(Duration.ofSeconds(116))));
    assertEquals("run 1/1: pulling, 0.5 s: 0.0 MiB fetched in 1 request", s.line("run 1/1: pulling",
        10 * SECOND + SECOND / 2, 100 * MIB, 41, Optional.empty()));
  }
}
