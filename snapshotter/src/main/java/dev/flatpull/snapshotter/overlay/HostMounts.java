package dev.flatpull.snapshotter.overlay;

import dev.flatpull.core.MountTable;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * Mounts of this host beyond what {@link MountTable} reads: how mounts propagate between namespaces, and detaching
 * them (mount(8) and umount(8) run through {@code HostCommand}).
 */
public final class HostMounts {
  private HostMounts() {}

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
    for (MountTable.Mount m : MountTable.parse(mountinfo)) {
      if (target.startsWith(m.point()) && (best == null || m.point().getNameCount() >= best.getNameCount())) {
        best = m.point();
        found = propagation(m);
      }
    }
    return found;
  }

  /** Whether a mount of {@code mountinfo} (another process's) is a peer or a slave of {@code peerGroup}. */
  public static boolean reaches(int peerGroup, List<String> mountinfo) {
    for (MountTable.Mount m : MountTable.parse(mountinfo)) {
      Propagation p = propagation(m);
      if (peerGroup > 0 && (p.peerGroup() == peerGroup || p.master() == peerGroup)) {
        return true;
      }
    }
    return false;
  }

  private static Propagation propagation(MountTable.Mount m) {
    int shared = 0;
    int master = 0;
    for (String f : m.optional()) {
      try {
        if (f.startsWith("shared:")) {
          shared = Integer.parseInt(f.substring("shared:".length()));
        } else if (f.startsWith("master:")) {
          master = Integer.parseInt(f.substring("master:".length()));
        }
      } catch (NumberFormatException e) {
        // Not a propagation field.
      }
    }
    return new Propagation(shared, master);
  }

  /** Detaches {@code mountPoint} now, even while files in it are open ({@code umount -l}). */
  public static void detach(Path mountPoint) throws IOException {
    dev.flatpull.core.HostCommand.run("umount", "-l", mountPoint.toString());
  }

  /** Detaches every mount at or below {@code dir}, deepest first. */
  public static void detachAllUnder(Path dir) throws IOException {
    for (Path p : MountTable.under(dir)) {
      detach(p);
    }
  }
}
