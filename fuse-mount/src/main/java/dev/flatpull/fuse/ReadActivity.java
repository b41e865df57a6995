package dev.flatpull.fuse;

/**
 * Counts on-demand reads that are waiting for the registry, so that background fetching can step aside while any is.
 * Thread-safe.
 */
public final class ReadActivity {
  private final Runnable onYield;
  private int waiting;

  public ReadActivity() {
    this(() -> {});
  }

  /** @param onYield runs (on the yielding thread, outside the lock) each time background work starts to wait */
  public ReadActivity(Runnable onYield) {
    this.onYield = onYield;
  }

  /** An on-demand read starts waiting for content. */
  public synchronized void begin() {
    waiting++;
  }

  /** It has its content. */
  public synchronized void end() {
    waiting--;
    if (waiting == 0) {
      notifyAll();
    }
  }

  /** Blocks while any on-demand read is waiting. */
  public void awaitIdle() throws InterruptedException {
    synchronized (this) {
      if (waiting == 0) {
        return;
      }
    }
    onYield.run();
    synchronized (this) {
      while (waiting > 0) {
        wait();
      }
    }
  }
}
