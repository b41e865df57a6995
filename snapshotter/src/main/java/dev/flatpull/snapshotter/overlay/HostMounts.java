package dev.flatpull.snapshotter.overlay;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** The kernel's mount table as seen by this process, and detaching mounts from it. */
public final class HostMounts {
  private HostMounts() {}

  /** Mount points at or below {@code dir}, deepest first (the order they must be detached in). */
  public static List<Path> under(Path dir) throws IOException {
    Path base = dir.toAbsolutePath().normalize();
    List<Path> found = new ArrayList<>();
    for (String line : Files.readAllLines(Path.of("/proc/self/mounts"))) {
      String[] fields = line.split(" ");
      if (fields.length < 3) {
        continue;
      }
      Path target = Path.of(unescape(fields[1]));
      if (target.startsWith(base)) {
        found.add(target);
      }
    }
    found.sort(Comparator.comparingInt(Path::getNameCount).reversed());
    return found;
  }

  public static boolean isMountPoint(Path dir) throws IOException {
    return under(dir).contains(dir.toAbsolutePath().normalize());
  }

  /** Detaches {@code mountPoint} now, even while files in it are open ({@code umount -l}). */
  public static void detach(Path mountPoint) throws IOException {
    run("umount", "-l", mountPoint.toString());
  }

  /** Detaches every mount at or below {@code dir}, deepest first. */
  public static void detachAllUnder(Path dir) throws IOException {
    for (Path p : under(dir)) {
      detach(p);
    }
  }

  /** Runs mount(8), umount(8) or a relative with {@code command}, failing with its output when it fails. */
  public static void run(String... command) throws IOException {
    try {
      Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
      String out = new String(p.getInputStream().readAllBytes());
      if (!p.waitFor(30, TimeUnit.SECONDS) || p.exitValue() != 0) {
        throw new IOException(String.join(" ", command) + " failed: " + out.trim());
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException(String.join(" ", command) + " interrupted");
    }
  }

  // /proc/self/mounts escapes space, tab, newline and backslash as octal.
  private static String unescape(String s) {
    if (s.indexOf('\\') < 0) {
      return s;
    }
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '\\' && i + 4 <= s.length()) {
        try {
          b.append((char) Integer.parseInt(s.substring(i + 1, i + 4), 8));
          i += 3;
          continue;
        } catch (NumberFormatException e) {
          // Not an escape after all.
        }
      }
      b.append(c);
    }
    return b.toString();
  }
}
