package dev.flatpull.core;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.ThreadFactory;
import java.util.function.Supplier;

/**
 * Waits in tests for a condition, never for a guessed time: a test that sleeps "long enough" is slow where the
 * machine is fast and flaky where it is slow. Shared with every module's tests through core's test-jar.
 */
public final class Await {
  private static final long POLL_NANOS = Duration.ofMillis(5).toNanos();

  private Await() {}

  /** A condition that may fail to be evaluated (a metrics scrape, a directory listing): the failure ends the wait. */
  @FunctionalInterface
  public interface Condition {
    boolean holds() throws Exception;
  }

  /**
   * Returns once {@code condition} holds; fails with {@code what} when it does not within {@code limit}.
   *
   * @throws AssertionError naming what was awaited
   */
  public static void until(Duration limit, Condition condition, Supplier<String> what) throws Exception {
    long deadline = System.nanoTime() + limit.toNanos();
    while (!condition.holds()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("not within " + limit + ": " + what.get());
      }
      java.util.concurrent.locks.LockSupport.parkNanos(POLL_NANOS);
      if (Thread.interrupted()) {
        throw new InterruptedException("awaiting " + what.get());
      }
    }
  }

  /**
   * Returns once every thread of {@code threads} waits (parked, or in {@code Object.wait}, with or without a timeout):
   * each has reached the wait the test holds it at, so what the test asserts next is not decided by the scheduler. A
   * thread blocked on entering a monitor is not counted: that wait is a passing one.
   */
  public static void waiting(Duration limit, List<Thread> threads) throws Exception {
    until(limit, () -> threads.stream().allMatch(Await::isWaiting), () -> "threads waiting: " + threads.stream()
        .map(t -> t.getName() + " " + t.getState()).toList());
  }

  private static boolean isWaiting(Thread t) {
    Thread.State s = t.getState();
    return s == Thread.State.WAITING || s == Thread.State.TIMED_WAITING;
  }

  /** A factory of daemon threads that adds each thread it makes to {@code made}, so that a test can await them. */
  public static ThreadFactory recording(List<Thread> made) {
    return r -> {
      Thread t = new Thread(r, "await-test-" + made.size());
      t.setDaemon(true);
      made.add(t);
      return t;
    };
  }
}
