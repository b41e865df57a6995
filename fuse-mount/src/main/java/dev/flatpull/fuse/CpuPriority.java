package dev.flatpull.fuse;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.concurrent.ThreadFactory;
import java.util.logging.Logger;
import java.util.stream.Stream;

/**
 * Work no start waits for, at the lowest CPU priority (nice 19): on a node's few cores it would otherwise take CPU
 * from the services starting beside it, which wait on their own reads. Measured on 2 cores (docs/benchmarks.md, "CPU
 * a start shares"): in a cold start with a runtime image the FUSE manager's threads used 1.8-2.0 s of CPU in 1.4-1.6
 * s, a third of it the JIT's optimizing compiler (C2) recompiling what the start made hot, and a second start of a
 * service on the node still had 100-280 ms of it. At nice 19 such a thread runs whenever a core is idle, as before,
 * and yields one that a service wants.
 *
 * <p>Work a starting service's reads wait for runs ahead of the services (nice {@value #AHEAD}): the FUSE workers,
 * the fetches they start and the runtime-image stream. The service is blocked on that work while it runs, so letting
 * the service's own threads preempt it only lengthens the service's wait; overlayfs does the same work in the reader's
 * own context, where no second thread has to be scheduled at all. A thread made by another inherits its maker's
 * priority (Linux), so the pools here set theirs when each thread starts, including the default ({@link #named}).
 *
 * <p>A failure to change a priority (no permission, a libc without {@code gettid}) is logged once and otherwise
 * ignored: the work runs at the priority it inherited.
 */
public final class CpuPriority {
  private static final Logger LOG = Logger.getLogger(CpuPriority.class.getName());
  /** The lowest priority a thread can have without a scheduling class of its own. */
  static final int LOWEST = 19;
  /**
   * What threads a read waits for run at: ahead of the services' default 0 (about three times the CPU share when both
   * want a core), far from the real-time classes.
   */
  static final int AHEAD = -5;
  static final int DEFAULT = 0;
  // The kernel's name of HotSpot's C2 compiler threads: "C2 CompilerThread0" cut at 15 characters.
  private static final String OPTIMIZING_COMPILER = "C2 CompilerThre";
  private static volatile boolean failureLogged;

  private CpuPriority() {}

  /** A factory of daemon threads called {@code name} that run at the lowest priority. */
  public static ThreadFactory background(String name) {
    return at(name, LOWEST);
  }

  /** A factory of daemon threads called {@code name} that run ahead of the services: work their reads wait for. */
  public static ThreadFactory ahead(String name) {
    return at(name, AHEAD);
  }

  /**
   * A factory of daemon threads called {@code name} at the default priority, whichever thread makes them (a pool's
   * threads are made by whoever submits when none is free: a FUSE worker, ahead, or a background thread).
   */
  public static ThreadFactory named(String name) {
    return at(name, DEFAULT);
  }

  private static ThreadFactory at(String name, int nice) {
    return r -> {
      Thread t = new Thread(() -> {
        setCallingThread(nice);
        r.run();
      }, name);
      t.setDaemon(true);
      return t;
    };
  }

  /** The calling thread at the lowest priority; whether it is. */
  public static boolean lowerCallingThread() {
    return setCallingThread(LOWEST);
  }

  private static boolean setCallingThread(int nice) {
    try {
      return set(Libc.Holder.LIBC.gettid(), nice, Thread.currentThread().getName());
    } catch (LinkageError | RuntimeException e) {
      logFailure("binding libc's gettid and setpriority failed: " + e);
      return false;
    }
  }

  /**
   * This JVM's optimizing compiler threads at the lowest priority; how many were lowered. HotSpot starts them before
   * {@code main}, one at least, and keeps the first of each compiler for the process's life; with
   * {@code -XX:+UseDynamicNumberOfCompilerThreads} (the default) one added under load later would run at the default
   * priority until it is removed again.
   */
  public static int lowerOptimizingCompiler() {
    int lowered = 0;
    try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
      for (Path task : tasks.toList()) {
        try {
          if (Files.readString(task.resolve("comm")).strip().equals(OPTIMIZING_COMPILER)
              && set(Integer.parseInt(task.getFileName().toString()), LOWEST, OPTIMIZING_COMPILER)) {
            lowered++;
          }
        } catch (NoSuchFileException ended) {
          // A thread that ended while listed.
        }
      }
    } catch (IOException | LinkageError | RuntimeException e) {
      logFailure("lowering the optimizing compiler's priority failed: " + e);
    }
    return lowered;
  }

  private static boolean set(int tid, int nice, String what) {
    if (Libc.Holder.LIBC.setpriority(Libc.PRIO_PROCESS, tid, nice) == 0) {
      return true;
    }
    logFailure("setpriority(" + what + ", " + nice + ") failed: errno " + Libc.Holder.errno());
    return false;
  }

  private static void logFailure(String message) {
    if (!failureLogged) {
      failureLogged = true;
      LOG.warning(message + "; threads run at the CPU priority they inherited");
    }
  }
}
