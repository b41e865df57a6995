package dev.flatpull.it.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * Where a process's CPU went during a start, by thread: each thread's time on a CPU from the kernel's scheduler
 * statistics ({@code /proc/PID/task/TID/schedstat}, nanoseconds) before and after, summed over threads of the same
 * name (the kernel keeps the first 15 characters of a Java thread's name). On two cores, a background thread's CPU is
 * taken from the starting service.
 */
final class ThreadCpu {
  private ThreadCpu() {}

  /** Nanoseconds on a CPU so far, by thread id, with each thread's name; empty when the process is gone. */
  static Map<Long, Map.Entry<String, Long>> snapshot(long pid) {
    Map<Long, Map.Entry<String, Long>> out = new HashMap<>();
    if (pid <= 0) {
      return out;
    }
    try (Stream<Path> tasks = Files.list(Path.of("/proc", Long.toString(pid), "task"))) {
      for (Path task : tasks.toList()) {
        try {
          String name = Files.readString(task.resolve("comm")).strip();
          long onCpu = Long.parseLong(Files.readString(task.resolve("schedstat")).strip().split(" ")[0]);
          out.put(Long.parseLong(task.getFileName().toString()), Map.entry(name, onCpu));
        } catch (NoSuchFileException gone) {
          // The thread ended between the listing and the read: its time is lost to both snapshots alike.
        }
      }
    } catch (IOException gone) {
      return out;
    }
    return out;
  }

  /**
   * One line: the process's CPU between the snapshots, in all and by thread name, largest first ({@code shown} names at
   * most). A thread that started in between counts from zero.
   */
  static String between(String process, Map<Long, Map.Entry<String, Long>> before,
      Map<Long, Map.Entry<String, Long>> after, int shown) {
    Map<String, Long> byName = new HashMap<>();
    after.forEach((tid, now) -> {
      Map.Entry<String, Long> then = before.get(tid);
      long spent = now.getValue() - (then == null ? 0 : then.getValue());
      if (spent > 0) {
        byName.merge(now.getKey(), spent, Long::sum);
      }
    });
    long total = byName.values().stream().mapToLong(Long::longValue).sum();
    List<Map.Entry<String, Long>> top = byName.entrySet().stream()
        .sorted(Map.Entry.<String, Long>comparingByValue(Comparator.reverseOrder())).limit(shown).toList();
    return String.format(Locale.ROOT, "%s CPU in the start: %.0f ms (%s)", process, total / 1e6, top.stream()
        .map(e -> String.format(Locale.ROOT, "%s %.0f", e.getKey(), e.getValue() / 1e6))
        .collect(Collectors.joining(", ")));
  }
}
