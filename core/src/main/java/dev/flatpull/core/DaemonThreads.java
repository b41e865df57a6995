package dev.flatpull.core;

import java.util.concurrent.ThreadFactory;

/**
 * Where flatpull's processes make their threads: daemon threads (none of them keeps a process alive that its
 * composition root is shutting down) named for what they do, so that a thread dump or a profile says whose they are.
 */
public final class DaemonThreads {
  private DaemonThreads() {}

  /** A factory of daemon threads all called {@code name}. */
  public static ThreadFactory named(String name) {
    return r -> {
      Thread t = new Thread(r, name);
      t.setDaemon(true);
      return t;
    };
  }
}
