package dev.flatpull.fuse;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

class CpuPriorityTest {
  /** A thread's nice value, from the kernel's view of it ({@code stat}'s 19th field; its name may hold spaces). */
  private static int nice(Path task) throws IOException {
    String stat = Files.readString(task.resolve("stat"));
    return Integer.parseInt(stat.substring(stat.lastIndexOf(')') + 2).split(" ")[16]);
  }

  @Test
  void aBackgroundThreadRunsAtTheLowestPriority_whileItsMakerKeepsItsOwn() throws Exception {
    int mine = nice(Path.of("/proc/thread-self"));
    CompletableFuture<Integer> seen = new CompletableFuture<>();
    Thread t = CpuPriority.background("flatpull-test-background").newThread(() -> {
      try {
        seen.complete(nice(Path.of("/proc/thread-self")));
      } catch (IOException e) {
        seen.completeExceptionally(e);
      }
    });
    assertTrue(t.isDaemon());
    assertEquals("flatpull-test-background", t.getName());
    t.start();
    assertEquals(CpuPriority.LOWEST, seen.get(10, TimeUnit.SECONDS));
    assertEquals(mine, nice(Path.of("/proc/thread-self")));
  }

  /** The nice value a thread made by {@code factory} has once running. */
  private static int niceOf(java.util.concurrent.ThreadFactory factory) throws Exception {
    CompletableFuture<Integer> seen = new CompletableFuture<>();
    factory.newThread(() -> {
      try {
        seen.complete(nice(Path.of("/proc/thread-self")));
      } catch (IOException e) {
        seen.completeExceptionally(e);
      }
    }).start();
    return seen.get(10, TimeUnit.SECONDS);
  }

  @Test
  void aThreadAReadWaitsFor_runsAheadOfTheServices_andWhatItMakesByNameRunsAtTheDefault() throws Exception {
    assertEquals(CpuPriority.AHEAD, niceOf(CpuPriority.ahead("flatpull-test-ahead")));
    // A pool's thread made from a thread ahead (a FUSE worker submitting) would inherit -5: its factory sets its own.
    CompletableFuture<Integer> made = new CompletableFuture<>();
    CpuPriority.ahead("flatpull-test-maker").newThread(() -> {
      try {
        made.complete(niceOf(CpuPriority.named("flatpull-test-named")));
      } catch (Exception e) {
        made.completeExceptionally(e);
      }
    }).start();
    assertEquals(CpuPriority.DEFAULT, made.get(10, TimeUnit.SECONDS));
    assertEquals(CpuPriority.LOWEST, niceOf(CpuPriority.background("flatpull-test-low")));
  }

  @Test
  void theOptimizingCompilerIsLowered_andNoOtherThread() throws Exception {
    int lowered = CpuPriority.lowerOptimizingCompiler();
    assertTrue(lowered >= 1, "no C2 compiler thread found in this JVM");
    try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
      for (Path task : tasks.toList()) {
        String name = Files.readString(task.resolve("comm")).strip();
        if (name.equals("C2 CompilerThre")) {
          assertEquals(CpuPriority.LOWEST, nice(task), name);
        } else if (name.equals("C1 CompilerThre") || name.equals("main")) {
          assertTrue(nice(task) < CpuPriority.LOWEST, name + " was lowered too");
        }
      }
    }
  }
}
