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
 * and yields one that a service wants. The FUSE requests, the runtime-image stream and the fetches a read waits for
 * keep the default priority.
 *
 * <p>A failure to lower (no permission, a libc without {@code gettid}) is logged once and otherwise ignored: the work
 * runs as before, at the default priority.
 */
public final class CpuPriority {
  private static final Logger LOG = Logger.getLogger(CpuPriority.class.getName());
  /** The lowest priority a thread can have without a scheduling class of its own. */
  static final int LOWEST = 19;
  // The kernel's name of HotSpot's C2 compiler threads: "C2 CompilerThread0" cut at 15 characters.
  private static final String OPTIMIZING_COMPILER = "C2 CompilerThre";
  private static volatile boolean failureLogged;

  private CpuPriority() {}

  /** A factory of daemon threads called {@code name} that run at the lowest priority. */
  public static ThreadFactory background(String name) {
    return r -> {
      Thread t = new Thread(() -> {
        lowerCallingThread();
        r.run();
      }, name);
      t.setDaemon(true);
      return t;
    };
  }

  /** The calling thread at the lowest priority; whether it is. */
  public static boolean lowerCallingThread() {
    try {
      return lower(Libc.Holder.LIBC.gettid(), Thread.currentThread().getName());
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
              && lower(Integer.parseInt(task.getFileName().toString()), OPTIMIZING_COMPILER)) {
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

  private static boolean lower(int tid, String what) {
    if (Libc.Holder.LIBC.setpriority(Libc.PRIO_PROCESS, tid, LOWEST) == 0) {
      return true;
    }
    logFailure("setpriority(" + what + ", " + LOWEST + ") failed: errno " + Libc.Holder.errno());
    return false;
  }

  private static void logFailure(String message) {
    if (!failureLogged) {
      failureLogged = true;
      LOG.warning(message + "; background work runs at the default CPU priority");
    }
  }
}
