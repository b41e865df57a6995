package dev.flatpull.manager;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Await;
import dev.flatpull.fuse.ReadActivity;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class SparesTest {
  private static final Duration QUIET = Duration.ofSeconds(2);

  private final ExecutorService builder = Executors.newSingleThreadExecutor(r -> new Thread(r, "spares-test-builder"));
  private final AtomicLong now = new AtomicLong();
  private final CountDownLatch yielded = new CountDownLatch(1);
  private final ReadActivity activity = new ReadActivity(QUIET, now::get, yielded::countDown);

  @AfterEach
  void stop() throws InterruptedException {
    builder.shutdownNow();
    assertTrue(builder.awaitTermination(10, TimeUnit.SECONDS));
  }

  /** Builds strings naming the thread that built them, and counts down once per build. */
  private static final class Builds implements Supplier<String> {
    final AtomicInteger count = new AtomicInteger();
    final CountDownLatch done;

    Builds(int expected) {
      done = new CountDownLatch(expected);
    }

    @Override
    public String get() {
      count.incrementAndGet();
      done.countDown();
      return Thread.currentThread().getName();
    }
  }

  @Test
  void quietReads_fillToTheTarget_andTakeHandsOutWhatTheBuilderBuilt() throws Exception {
    Builds builds = new Builds(3);
    Spares<String> spares = new Spares<>(3, builds, activity, builder);
    assertTrue(builds.done.await(10, TimeUnit.SECONDS));

    assertEquals("spares-test-builder", spares.take());
    // The one taken is replaced (no read is busy): back to three, never more.
    Await.until(Duration.ofSeconds(5), () -> spares.ready() >= 3, () -> spares.ready() + " spares ready");
    assertEquals(3, spares.ready());
    assertEquals(4, builds.count.get());
  }

  @Test
  void aWaitingRead_holdsBuildingBack_untilReadsHaveBeenQuietForTheQuietPeriod() throws Exception {
    activity.begin();
    Builds builds = new Builds(2);
    Spares<String> spares = new Spares<>(2, builds, activity, builder);
    // The builder is parked behind the read: nothing built, and a mount now builds its own on its own thread.
    assertTrue(yielded.await(10, TimeUnit.SECONDS));
    assertEquals(0, spares.ready());
    assertEquals(Thread.currentThread().getName(), spares.take());
    assertEquals(1, builds.count.get());

    activity.end();
    now.addAndGet(QUIET.toNanos());
    activity.recheck();
    Await.until(Duration.ofSeconds(5), () -> spares.ready() >= 2, () -> spares.ready() + " spares ready");
    assertEquals(2, spares.ready());
    assertNotEquals(Thread.currentThread().getName(), spares.take());
  }

  @Test
  void aFailingBuilder_leavesTheMountToBuildItsOwn_andToFailWithTheReason() throws Exception {
    // Builds fail on the builder's thread only (first for a missing library, then for a missing binding), never on the
    // mount's: which thread builds decides, not the order of calls, which the two threads race for.
    String mount = Thread.currentThread().getName();
    AtomicInteger builderCalls = new AtomicInteger();
    CountDownLatch failed = new CountDownLatch(1);
    Spares<String> spares = new Spares<>(2, () -> {
      if (Thread.currentThread().getName().equals(mount)) {
        return mount;
      }
      if (builderCalls.incrementAndGet() == 1) {
        failed.countDown();
        throw new IllegalStateException("no libfuse");
      }
      throw new UnsatisfiedLinkError("libfuse.so.2");
    }, activity, builder);
    assertTrue(failed.await(10, TimeUnit.SECONDS));
    builder.submit(() -> { }).get(10, TimeUnit.SECONDS);
    assertEquals(1, builderCalls.get(), "the failed builder stopped");
    // The mount builds its own; filling resumed after that take, and fails again.
    assertEquals(mount, spares.take());
    // The take queued the refill before it returned: a task queued after it runs once that refill has failed.
    builder.submit(() -> { }).get(10, TimeUnit.SECONDS);
    assertEquals(2, builderCalls.get(), "and stopped again");
    builder.shutdown();
    assertTrue(builder.awaitTermination(10, TimeUnit.SECONDS));
    assertEquals(mount, spares.take());
    assertEquals(0, spares.ready());
  }

  @Test
  void aTargetOfNone_isRefused() {
    assertThrows(IllegalArgumentException.class, () -> new Spares<>(0, () -> "x", activity, builder));
  }
}
