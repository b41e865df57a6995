package dev.flatpull.manager;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A FUSE manager handing over to its successor ({@code Retire}): the calls in progress finish, later ones are
 * refused, so that the successor answers them. Thread-safe.
 */
final class Retirement {
  private final ReentrantReadWriteLock calls = new ReentrantReadWriteLock();
  private volatile boolean retiring;

  /** Whether a call may run here; if so, {@link #leave} must follow it. False once retiring. */
  boolean enter() {
    if (retiring) {
      return false;
    }
    calls.readLock().lock();
    if (retiring) {
      // retire() began meanwhile: it waits for this call unless it leaves at once.
      calls.readLock().unlock();
      return false;
    }
    return true;
  }

  void leave() {
    calls.readLock().unlock();
  }

  /**
   * Refuses every later call and waits, for at most {@code patience}, for those in progress.
   *
   * @return whether they all finished
   */
  boolean retire(Duration patience) throws InterruptedException {
    retiring = true;
    if (calls.writeLock().tryLock(patience.toNanos(), TimeUnit.NANOSECONDS)) {
      // Held for good: nothing may run here any more.
      return true;
    }
    return false;
  }

  boolean retiring() {
    return retiring;
  }
}
