package dev.flatpull.fuse;

import java.time.Duration;
import java.util.function.LongSupplier;

/**
 * Counts on-demand reads that are waiting for the registry, so that background fetching can step aside while any is,
 * and until they have left the registry alone for a quiet period. Thread-safe.
 */
public final class ReadActivity {
  private final Runnable onYield;
  private final long quietNanos;
  private final LongSupplier nanoTime;
  private int waiting;
  private long lastActivity;
  private boolean active;

  /** No quiet period: background work resumes as soon as no read waits. */
  public ReadActivity() {
    this(() -> {});
  }

  /** @param onYield runs (on the yielding thread, outside the lock) each time background work starts to wait */
  public ReadActivity(Runnable onYield) {
    this(Duration.ZERO, System::nanoTime, onYield);
  }

  /**
   * @param quiet how long after the last on-demand read began or ended background work may go on
   * @param nanoTime the clock that measures it
   */
  public ReadActivity(Duration quiet, LongSupplier nanoTime, Runnable onYield) {
    this.quietNanos = quiet.toNanos();
    this.nanoTime = nanoTime;
    this.onYield = onYield;
  }

  /** An on-demand read starts waiting for content. */
  public synchronized void begin() {
    waiting++;
    touch();
  }

  /** It has its content. */
  public synchronized void end() {
    waiting--;
    touch();
    if (waiting == 0) {
      notifyAll();
    }
  }

  /** Something that will read soon (a layer being mounted) restarts the quiet period. */
  public synchronized void touch() {
    lastActivity = nanoTime.getAsLong();
    active = true;
  }

  /** Blocks while any on-demand read is waiting, and then until none has begun or ended for the quiet period. */
  public void awaitIdle() throws InterruptedException {
    synchronized (this) {
      if (idle()) {
        return;
      }
    }
    onYield.run();
    synchronized (this) {
      while (!idle()) {
        if (waiting > 0) {
          wait();
        } else {
          long left = quietNanos - (nanoTime.getAsLong() - lastActivity);
          wait(Math.max(1, left / 1_000_000), 0);
        }
      }
    }
  }

  /** Wakes waiters to look at the clock again (for a clock that is not the system's). */
  public synchronized void recheck() {
    notifyAll();
  }

  private boolean idle() {
    return waiting == 0 && (!active || nanoTime.getAsLong() - lastActivity >= quietNanos);
  }
}
