package dev.flatpull.snapshotter.overlay;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

class HostMountsTest {
  // As a Kubernetes pod sees it: its root private, a hostPath with Bidirectional propagation shared, one with
  // HostToContainer a slave, and a path with a space (escaped by the kernel).
  private static final List<String> POD = List.of(
      "1200 1100 0:310 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w",
      "1201 1200 254:0 /var/lib/flatpull /var/lib/flatpull rw,relatime shared:1 - ext4 /dev/vda rw",
      "1202 1200 254:0 /run/flatpull /run/flatpull rw,relatime master:7 - ext4 /dev/vda rw",
      "1203 1200 254:0 /srv/a\\040b /srv/a\\040b rw,relatime shared:3 master:9 - ext4 /dev/vda rw",
      "1204 1201 0:55 / /var/lib/flatpull/snapshots/1/fs rw,nosuid - fuse.flatpull flatpull rw",
      "1205 1200 0:60 / /run/flatpull rw - tmpfs tmpfs rw");

  // The host's side: the hostPath's mount in peer group 1, nothing of group 42.
  private static final List<String> HOST = List.of(
      "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
      "28 27 0:25 / /run rw,nosuid shared:7 - tmpfs tmpfs rw");

  private static String of(String dir, List<String> mountinfo) {
    return HostMounts.propagationOf(Path.of(dir), mountinfo).toString();
  }

  @Test
  void propagationOf_theDeepestMountHoldingThePath_decides() {
    assertEquals("shared (peer group 1)", of("/var/lib/flatpull", POD));
    assertEquals("shared (peer group 1)", of("/var/lib/flatpull/snapshots", POD));
    assertEquals("private", of("/var/lib/flatpull/snapshots/1/fs/x", POD));
    assertEquals("private", of("/var/lib", POD));
    assertEquals("shared (peer group 3)", of("/srv/a b/c", POD), "escaped mount points, shared and slave at once");
  }

  @Test
  void propagationOf_aLaterMountOverTheSamePoint_coversTheEarlier() {
    assertEquals("private", of("/run/flatpull/x.sock", POD));
    assertEquals("slave", of("/run/flatpull", POD.subList(0, 5)));
  }

  @Test
  void reaches_aPeerGroupSeenInTheOtherNamespace() {
    assertTrue(HostMounts.reaches(1, HOST));
    assertTrue(HostMounts.reaches(7, HOST));
    assertFalse(HostMounts.reaches(42, HOST), "a group of its own, as unshare --propagation shared makes");
    assertFalse(HostMounts.reaches(0, HOST), "an unshared mount reaches nothing");
  }
}
