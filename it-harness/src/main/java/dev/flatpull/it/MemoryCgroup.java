package dev.flatpull.it;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * A memory cgroup of its own for processes a benchmark starts, with a limit and a peak to read: cgroup v2's
 * {@code memory.max} and {@code memory.peak} where the unified hierarchy has the memory controller, else cgroup v1's
 * {@code memory.limit_in_bytes} and {@code memory.max_usage_in_bytes} (hybrid hosts, such as this project's build
 * machines: docs/development.md). v1 charges the page cache of files the processes write to the group too, so its
 * peak includes reclaimable cache; v2's does as well (both count what the limit counts).
 */
public final class MemoryCgroup implements AutoCloseable {
  private final Path dir;
  private final boolean v2;

  private MemoryCgroup(Path dir, boolean v2) {
    this.dir = dir;
    this.v2 = v2;
  }

  /** A new group {@code name} beside the calling process's own memory group, limited to {@code limitBytes}. */
  public static MemoryCgroup create(String name, long limitBytes) throws IOException {
    Path unified = Path.of("/sys/fs/cgroup");
    boolean v2 = Files.exists(unified.resolve("cgroup.controllers"))
        && Files.readString(unified.resolve("cgroup.controllers")).contains("memory");
    Path parent = v2 ? unified.resolve(own("").substring(1)) : Path.of("/sys/fs/cgroup/memory")
        .resolve(own("memory").substring(1));
    if (v2) {
      // Processes may not sit in an inner node of v2: the group goes beside ours, under our parent.
      parent = parent.getParent();
    }
    Path dir = parent.resolve(name);
    Files.createDirectories(dir);
    MemoryCgroup g = new MemoryCgroup(dir, v2);
    Files.writeString(dir.resolve(v2 ? "memory.max" : "memory.limit_in_bytes"), Long.toString(limitBytes));
    return g;
  }

  /** The calling process's group path in the hierarchy of {@code controller} ({@code ""}: the unified one). */
  private static String own(String controller) throws IOException {
    for (String line : Files.readAllLines(Path.of("/proc/self/cgroup"))) {
      String[] f = line.split(":", 3);
      if (f.length == 3 && (controller.isEmpty() ? f[0].equals("0") : List.of(f[1].split(",")).contains(controller))) {
        return f[2];
      }
    }
    throw new IOException("/proc/self/cgroup names no " + (controller.isEmpty() ? "unified" : controller) + " group");
  }

  /** The file a process writes its pid to, to join the group (children it starts then belong to it). */
  public Path procs() {
    return dir.resolve("cgroup.procs");
  }

  /** The command that runs {@code command} inside the group: a shell that joins it, then execs the command. */
  public List<String> wrap(List<String> command) {
    List<String> out = new java.util.ArrayList<>(List.of("sh", "-c", "echo $$ > \"$0\" && exec \"$@\"",
        procs().toString()));
    out.addAll(command);
    return out;
  }

  /** The most memory the group has held since it was made or {@link #resetPeak} was last called. */
  public long peakBytes() throws IOException {
    return Long.parseLong(Files.readString(dir.resolve(v2 ? "memory.peak" : "memory.max_usage_in_bytes")).trim());
  }

  /** What the group holds now (memory.current, v1's usage_in_bytes). */
  public long usageBytes() throws IOException {
    return Long.parseLong(Files.readString(dir.resolve(v2 ? "memory.current" : "memory.usage_in_bytes")).trim());
  }

  /** Starts a new peak from the group's current use. */
  public void resetPeak() throws IOException {
    // v2 resets memory.peak on any write (kernel 6.12 and later); v1 on a write of 0.
    Files.writeString(dir.resolve(v2 ? "memory.peak" : "memory.max_usage_in_bytes"), v2 ? "reset" : "0");
  }

  /** The group's limit in bytes. */
  public long limitBytes() throws IOException {
    String v = Files.readString(dir.resolve(v2 ? "memory.max" : "memory.limit_in_bytes")).trim();
    return v.equals("max") ? Long.MAX_VALUE : Long.parseLong(v);
  }

  /** Processes of the group the kernel killed for want of memory under its limit. */
  public long oomKills() throws IOException {
    for (String line : Files.readAllLines(dir.resolve(v2 ? "memory.events" : "memory.oom_control"))) {
      if (line.startsWith("oom_kill ")) {
        return Long.parseLong(line.substring("oom_kill ".length()).trim());
      }
    }
    return 0;
  }

  /** Removes the group; its processes must have exited. */
  @Override
  public void close() throws IOException {
    for (int i = 0; i < 50 && Files.exists(dir); i++) {
      try {
        Files.delete(dir);
      } catch (IOException busy) {
        try {
          Thread.sleep(100); // the last process's exit is accounted a moment after it is reaped
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return;
        }
      }
    }
  }
}
