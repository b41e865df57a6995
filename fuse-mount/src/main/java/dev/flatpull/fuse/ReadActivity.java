package dev.flatpull.fuse;

/**
 * Counts on-demand reads that are waiting for the registry, so that background fetching can step aside while any is.
 * Thread-safe.
 */
public final class ReadActivity {
  private int waiting;

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
  public synchronized void awaitIdle() throws InterruptedException {
    while (waiting > 0) {
      wait();
    }
  }
}
