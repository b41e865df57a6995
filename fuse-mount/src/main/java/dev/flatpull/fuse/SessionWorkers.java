package dev.flatpull.fuse;

import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;

/**
 * The threads that serve one FUSE session, grown and shrunk as libfuse grows its own: one more starts when a request
 * leaves none waiting, up to a maximum, and a worker that finishes a request while more than {@link #MAX_IDLE} wait
 * ends. Forgets do not count (a burst of them would otherwise start a thread each, as libfuse notes). A request that
 * blocks on the registry holds only its own worker. Each engine's loop reports to it around every request.
 */
final class SessionWorkers {
  static final int MAX_WORKERS = 64;
  static final int MAX_IDLE = 10;

  private final int max;
  private final Executor threads;
  private final Runnable loop;
  // Guarded by this: workers running, and those among them waiting for a request.
  private int workers;
  private int waiting;

  /**
   * @param threads each task of it is a worker running {@code loop} until the loop returns
   * @param loop one worker: waits for requests and serves them, reporting to {@link #took}, {@link #served} and
   *     {@link #ended}
   */
  SessionWorkers(int max, Executor threads, Runnable loop) {
    this.max = max;
    this.threads = threads;
    this.loop = loop;
  }

  /** Starts the first worker; false when no thread can be had. */
  boolean start() {
    synchronized (this) {
      workers = 1;
      waiting = 1;
    }
    return launch();
  }

  /** A worker took a request off the device: one more starts when none is left waiting. */
  void took(boolean forget) {
    boolean grow = false;
    synchronized (this) {
      if (!forget) {
        waiting--;
      }
      if (waiting == 0 && workers < max) {
        workers++;
        waiting++;
        grow = true;
      }
    }
    if (grow) {
      launch();
    }
  }

  /** A worker served its request and waits again; true when it should end instead, there being enough waiting. */
  boolean served(boolean forget) {
    synchronized (this) {
      if (!forget) {
        waiting++;
      }
      return waiting > MAX_IDLE;
    }
  }

  /**
   * A worker's loop ended, {@code idle} when it was waiting for a request (not in the middle of one).
   *
   * @return whether it was the last: only the session's end leaves none
   */
  boolean ended(boolean idle) {
    synchronized (this) {
      workers--;
      if (idle) {
        waiting--;
      }
      return workers == 0;
    }
  }

  /** Starts one more worker (already counted); when no thread can be had, uncounts it. */
  private boolean launch() {
    try {
      threads.execute(loop);
      return true;
    } catch (RejectedExecutionException | OutOfMemoryError e) {
      synchronized (this) {
        workers--;
        waiting--;
      }
      return false;
    }
  }
}
