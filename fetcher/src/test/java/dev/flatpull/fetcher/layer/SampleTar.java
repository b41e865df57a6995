package dev.flatpull.fetcher.layer;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveOutputStream;
import org.apache.commons.compress.archivers.tar.TarConstants;

/**
 * A tar archive built with commons-compress (an implementation independent of flatpull's), holding every entry type a
 * layer can have, and the expectations the tests check the lazy formats against.
 */
final class SampleTar {
  /** What the tar holds: name to (type, content or link). */
  record Item(String name, EntryType type, byte[] content, String link, int mode, int uid, int gid) {}

  final List<Item> items = new ArrayList<>();
  final byte[] bytes;

  SampleTar(long seed, int bigFileSize) throws IOException {
    Random r = new Random(seed);
    Map<String, byte[]> files = new LinkedHashMap<>();
    files.put("etc/hostname", "flatpull\n".getBytes(StandardCharsets.US_ASCII));
    files.put("etc/empty", new byte[0]);
    files.put("usr/share/doc/one-byte", new byte[] {42});
    files.put("usr/share/doc/block", bytes(r, 512));
    files.put("usr/share/doc/odd", bytes(r, 4097));
    files.put("usr/bin/big", bytes(r, bigFileSize));
    files.put("usr/lib/" + "very-long-directory-name-".repeat(5) + "/lib.so", bytes(r, 70_000));
    files.put("usr/share/zeros", new byte[300_000]);
    // Data, a run of zeros long enough to be a hole, data: containers/storage stores the run as a zeros chunk.
    byte[] holes = bytes(r, 200_000);
    java.util.Arrays.fill(holes, 70_000, 90_000, (byte) 0);
    files.put("usr/share/holes", holes);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (TarArchiveOutputStream tar = new TarArchiveOutputStream(out)) {
      tar.setLongFileMode(TarArchiveOutputStream.LONGFILE_POSIX);
      tar.setBigNumberMode(TarArchiveOutputStream.BIGNUMBER_POSIX);
      for (String dir : List.of("etc/", "usr/", "usr/bin/", "usr/lib/", "usr/share/", "usr/share/doc/",
          "usr/lib/" + "very-long-directory-name-".repeat(5) + "/", "dev/", "run/")) {
        TarArchiveEntry e = new TarArchiveEntry(dir);
        e.setMode(040755);
        add(tar, e, null, new Item(dir.substring(0, dir.length() - 1), EntryType.DIR, null, "", 0755, 0, 0));
      }
      for (Map.Entry<String, byte[]> f : files.entrySet()) {
        TarArchiveEntry e = new TarArchiveEntry(f.getKey());
        e.setSize(f.getValue().length);
        int mode = f.getKey().equals("usr/bin/big") ? 04755 : 0644;
        e.setMode(0100000 | mode);
        e.setIds(f.getKey().startsWith("etc") ? 1000 : 0, f.getKey().startsWith("etc") ? 1001 : 0);
        if (f.getKey().equals("etc/hostname")) {
          e.addPaxHeader("SCHILY.xattr.user.comment", "hello");
        }
        add(tar, e, f.getValue(), new Item(f.getKey(), EntryType.REG, f.getValue(), "", mode,
            f.getKey().startsWith("etc") ? 1000 : 0, f.getKey().startsWith("etc") ? 1001 : 0));
      }
      TarArchiveEntry sym = new TarArchiveEntry("usr/bin/sh", TarConstants.LF_SYMLINK);
      sym.setLinkName("../../bin/busybox");
      add(tar, sym, null, new Item("usr/bin/sh", EntryType.SYMLINK, null, "../../bin/busybox", 0777, 0, 0));
      TarArchiveEntry hard = new TarArchiveEntry("usr/bin/big-again", TarConstants.LF_LINK);
      hard.setLinkName("usr/bin/big");
      add(tar, hard, null, new Item("usr/bin/big-again", EntryType.HARDLINK, null, "usr/bin/big", 04755, 0, 0));
      TarArchiveEntry fifo = new TarArchiveEntry("run/fifo", TarConstants.LF_FIFO);
      fifo.setMode(0600);
      add(tar, fifo, null, new Item("run/fifo", EntryType.FIFO, null, "", 0600, 0, 0));
      TarArchiveEntry dev = new TarArchiveEntry("dev/null", TarConstants.LF_CHR);
      dev.setDevMajor(1);
      dev.setDevMinor(3);
      dev.setMode(0666);
      add(tar, dev, null, new Item("dev/null", EntryType.CHAR, null, "", 0666, 0, 0));
      TarArchiveEntry whiteout = new TarArchiveEntry("etc/.wh.removed");
      whiteout.setSize(0);
      add(tar, whiteout, new byte[0], new Item("etc/.wh.removed", EntryType.REG, new byte[0], "", 0644, 0, 0));
    }
    this.bytes = out.toByteArray();
  }

  private void add(TarArchiveOutputStream tar, TarArchiveEntry e, byte[] content, Item item) throws IOException {
    tar.putArchiveEntry(e);
    if (content != null) {
      tar.write(content);
    }
    tar.closeArchiveEntry();
    items.add(item);
  }

  private static byte[] bytes(Random r, int n) {
    byte[] b = new byte[n];
    // Half random, half text-like, so that compression does something but not everything.
    for (int i = 0; i < n; i++) {
      b[i] = (i / 4096) % 2 == 0 ? (byte) r.nextInt(256) : (byte) ('a' + (i % 26));
    }
    return b;
  }

  Item item(String name) {
    return items.stream().filter(i -> i.name().equals(name)).findFirst().orElseThrow();
  }
}
