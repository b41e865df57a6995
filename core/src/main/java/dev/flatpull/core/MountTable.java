package dev.flatpull.core;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * The kernel's mount table as this process sees it ({@code /proc/self/mountinfo}), with mount points unescaped: the
 * one reader of it, so that a mount point with a space (which the kernel writes as {@code \040}) is the same mount
 * point to every caller.
 */
public final class MountTable {
  private MountTable() {}

  /**
   * One line of mountinfo ({@code proc(5)}: ID PARENT MAJOR:MINOR ROOT MOUNT-POINT OPTIONS [OPTIONAL-FIELDS...] - TYPE
   * SOURCE SUPER-OPTIONS).
   *
   * @param device MAJOR:MINOR of the mounted file system
   * @param optional the optional fields ({@code shared:N}, {@code master:N}, ...)
   * @param type the file system type ({@code fuse.flatpull}, {@code overlay}, ...)
   */
  public record Mount(Path point, String device, List<String> optional, String type) {}

  /** This process's mounts, in the kernel's order (a later mount at a point covers an earlier one). */
  public static List<Mount> read() throws IOException {
    return parse(Files.readAllLines(Path.of("/proc/self/mountinfo")));
  }

  /** The mounts of mountinfo {@code lines} (this process's or another's); malformed lines are left out. */
  public static List<Mount> parse(List<String> lines) {
    List<Mount> mounts = new ArrayList<>(lines.size());
    for (String line : lines) {
      String[] f = line.split(" ");
      if (f.length < 7) {
        continue;
      }
      List<String> optional = new ArrayList<>();
      int i = 6;
      for (; i < f.length && !f[i].equals("-"); i++) {
        optional.add(f[i]);
      }
      String type = i + 1 < f.length ? f[i + 1] : "";
      mounts.add(new Mount(Path.of(unescape(f[4])), f[2], optional, type));
    }
    return mounts;
  }

  /** Mount points at or below {@code dir}, deepest first (the order they must be detached in). */
  public static List<Path> under(Path dir) throws IOException {
    Path base = dir.toAbsolutePath().normalize();
    List<Path> found = new ArrayList<>();
    for (Mount m : read()) {
      if (m.point().startsWith(base)) {
        found.add(m.point());
      }
    }
    found.sort(Comparator.comparingInt(Path::getNameCount).reversed());
    return found;
  }

  /** Whether something is mounted at {@code dir}. */
  public static boolean isMountPoint(Path dir) throws IOException {
    Path target = dir.toAbsolutePath().normalize();
    for (Mount m : read()) {
      if (m.point().equals(target)) {
        return true;
      }
    }
    return false;
  }

  /** The kernel escapes space, tab, newline and backslash in mount points as a backslash and three octal digits. */
  static String unescape(String s) {
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
