package dev.flatpull.manager;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class IndexWritesTest {
  private final List<Runnable> atOnce = new ArrayList<>();
  private final List<Runnable> quiet = new ArrayList<>();
  private final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();

  @AfterEach
  void stop() {
    timer.shutdownNow();
  }

  @Test
  void aSmallFile_isWrittenAtOnce_withoutWaitingForQuietReads() {
    IndexWrites writes = new IndexWrites(atOnce::add, quiet::add, timer, Duration.ofDays(1));
    Runnable write = () -> {};
    writes.schedule(IndexWrites.AT_ONCE_BYTES, write);
    assertEquals(List.of(write), atOnce);
    assertEquals(List.of(), quiet);
  }

  @Test
  void aLargeFile_waitsForQuietReads_orTheDeadline() throws Exception {
    CountDownLatch handedOver = new CountDownLatch(1);
    IndexWrites writes = new IndexWrites(w -> {
      atOnce.add(w);
      handedOver.countDown();
    }, quiet::add, timer, Duration.ofMillis(50));
    Runnable write = () -> {};
    writes.schedule(IndexWrites.AT_ONCE_BYTES + 1, write);
    assertEquals(List.of(write), quiet, "it waits for quiet reads");
    assertTrue(handedOver.await(10, TimeUnit.SECONDS), "and is written at the deadline if reads never quiet down");
    assertEquals(List.of(write), atOnce);
  }
}
