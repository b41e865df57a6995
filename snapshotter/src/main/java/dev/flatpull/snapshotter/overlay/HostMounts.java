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

  /**
   * How mounts made below a mount point reach other mount namespaces ({@code mount --make-shared} and kin).
   *
   * @param peerGroup the shared peer group ({@code shared:N}) the mount belongs to, 0 when it is not shared
   * @param master the peer group it receives mounts from ({@code master:N}), 0 when none
   */
  public record Propagation(int peerGroup, int master) {
    public boolean shared() {
      return peerGroup > 0;
    }

    @Override
    public String toString() {
      return peerGroup > 0 ? "shared (peer group " + peerGroup + ")" : master > 0 ? "slave" : "private";
    }
  }

  /** The propagation of the mount that holds {@code dir}, from {@code /proc/self/mountinfo}. */
  public static Propagation propagationOf(Path dir) throws IOException {
    return propagationOf(dir, Files.readAllLines(Path.of("/proc/self/mountinfo")));
  }

  /**
   * The propagation of the mount that holds {@code dir} in {@code mountinfo} lines ({@code proc(5)}: ID PARENT
   * MAJOR:MINOR ROOT MOUNT-POINT OPTIONS [OPTIONAL-FIELDS...] - TYPE SOURCE SUPER-OPTIONS). The deepest mount point
   * at or above {@code dir} holds it; of equal ones the later, which covers the earlier.
   */
  public static Propagation propagationOf(Path dir, List<String> mountinfo) {
    Path target = dir.toAbsolutePath().normalize();
    Path best = null;
    Propagation found = new Propagation(0, 0);
    for (String line : mountinfo) {
      String[] f = line.split(" ");
      if (f.length < 7) {
        continue;
      }
      Path point = Path.of(unescape(f[4]));
      if (target.startsWith(point) && (best == null || point.getNameCount() >= best.getNameCount())) {
        best = point;
        found = optionalFields(f);
      }
    }
    return found;
  }

  /** Whether a mount of {@code mountinfo} (another process's) is a peer or a slave of {@code peerGroup}. */
  public static boolean reaches(int peerGroup, List<String> mountinfo) {
    for (String line : mountinfo) {
      Propagation p = optionalFields(line.split(" "));
      if (peerGroup > 0 && (p.peerGroup() == peerGroup || p.master() == peerGroup)) {
        return true;
      }
    }
    return false;
  }

  private static Propagation optionalFields(String[] f) {
    int shared = 0;
    int master = 0;
    for (int i = 6; i < f.length && !f[i].equals("-"); i++) {
      try {
        if (f[i].startsWith("shared:")) {
          shared = Integer.parseInt(f[i].substring("shared:".length()));
        } else if (f[i].startsWith("master:")) {
          master = Integer.parseInt(f[i].substring("master:".length()));
        }
      } catch (NumberFormatException e) {
        // Not a propagation field.
      }
    }
    return new Propagation(shared, master);
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

  // /proc/self/mounts and mountinfo escape space, tab, newline and backslash as octal.
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
