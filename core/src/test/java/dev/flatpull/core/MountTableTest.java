package dev.flatpull.core;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

class MountTableTest {
  private static final List<String> MOUNTINFO = List.of(
      "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
      "1203 27 254:0 /srv/a\\040b /srv/a\\040b rw,relatime shared:3 master:9 - ext4 /dev/vda rw",
      "1204 27 0:55 / /var/lib/flatpull/remote/tab\\011and\\134back rw,nosuid - fuse.flatpull flatpull rw",
      "truncated line",
      "1205 27 0:60 / /run/flatpull rw - tmpfs tmpfs rw");

  @Test
  void parse_unescapesMountPoints_andReadsDeviceOptionalFieldsAndType() {
    List<MountTable.Mount> m = MountTable.parse(MOUNTINFO);
    assertEquals(4, m.size(), "the malformed line is left out");
    assertEquals(new MountTable.Mount(Path.of("/srv/a b"), "254:0", List.of("shared:3", "master:9"), "ext4"), m.get(1));
    assertEquals(Path.of("/var/lib/flatpull/remote/tab\tand\\back"), m.get(2).point());
    assertEquals("fuse.flatpull", m.get(2).type());
    assertEquals(List.of(), m.get(3).optional());
    assertEquals("0:60", m.get(3).device());
  }

  @Test
  void unescape_leavesWhatIsNotAnOctalEscape() {
    assertEquals("/a\\x12", MountTable.unescape("/a\\x12"));
    assertEquals("/end\\", MountTable.unescape("/end\\"));
    assertEquals("/plain", MountTable.unescape("/plain"));
  }

  @Test
  void parse_keepsShortButWellFormedLines_andEndsWithoutASeparatorOrType() {
    List<MountTable.Mount> m = MountTable.parse(List.of(
        "1 2 0:1 / /seven rw shared:7",
        "1 2 0:2 / /no-separator rw shared:1 master:2",
        "1 2 0:3 / /separator-last rw -"));
    assertEquals(3, m.size(), "seven fields are enough");
    assertEquals(Path.of("/seven"), m.get(0).point());
    assertEquals(List.of("shared:1", "master:2"), m.get(1).optional());
    assertEquals("", m.get(1).type());
    assertEquals("", m.get(2).type());
  }

  @Test
  void unescape_atEitherEnd() {
    assertEquals(" x", MountTable.unescape("\\040x"));
    assertEquals("/a ", MountTable.unescape("/a\\040"));
  }
}
