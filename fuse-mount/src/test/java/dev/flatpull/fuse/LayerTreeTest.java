package dev.flatpull.fuse;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.PlainLayerIndexer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import dev.flatpull.fuse.LayerTree.Kind;
import dev.flatpull.fuse.LayerTree.Node;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The tree a layer's FUSE mount shows, built from an index, as overlayfs expects of a lower directory. */
class LayerTreeTest {
  @TempDir Path dir;

  private static TarHeader h(String name, char type, int mode, String link, int major, int minor, Map<String, byte[]> x) {
    return new TarHeader(name, type, 0, mode, 7, 8, "", "", Instant.ofEpochSecond(1_600_000_000), link, major, minor, x);
  }

  private LayerTree tree() throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    byte[] content = "#!/bin/sh\n".getBytes(StandardCharsets.US_ASCII);
    TarWriter.writeHeader(out, new TarHeader("usr/bin/tool", TarHeader.REG, content.length, 04755, 0, 0, "", "",
        Instant.ofEpochSecond(1_600_000_000), "", 0, 0,
        Map.of("security.capability", new byte[] {1, 0, 0, 2}, "user.note", "n".getBytes(StandardCharsets.US_ASCII))));
    out.write(content);
    TarWriter.pad(out, content.length);
    for (TarHeader x : List.of(
        h("usr/bin/tool-link", TarHeader.HARDLINK, 0, "usr/bin/tool", 0, 0, Map.of()),
        h("usr/bin/sh", TarHeader.SYMLINK, 0777, "tool", 0, 0, Map.of()),
        h("dev/null", TarHeader.CHAR, 0666, "", 1, 3, Map.of()),
        h("dev/sda", TarHeader.BLOCK, 0660, "", 8, 0, Map.of()),
        h("run/pipe", TarHeader.FIFO, 0600, "", 0, 0, Map.of()),
        h("tmp/", TarHeader.DIR, 01777, "", 0, 0, Map.of()),
        h("srv/", TarHeader.DIR, 0755, "", 0, 0, Map.of("trusted.overlay.opaque", "y".getBytes(StandardCharsets.US_ASCII),
            "trusted.overlay.redirect", "/etc".getBytes(StandardCharsets.US_ASCII),
            "user.kept", "k".getBytes(StandardCharsets.US_ASCII))),
        h("srv/file", TarHeader.FIFO, 0600, "", 0, 0, Map.of("trusted.overlay.metacopy", new byte[0])),
        h("etc/.wh.gone", TarHeader.REG, 0, "", 0, 0, Map.of()),
        h("var/cache/.wh..wh..opq", TarHeader.REG, 0, "", 0, 0, Map.of()))) {
      TarWriter.writeHeader(out, x);
    }
    TarWriter.writeEnd(out);
    Path tar = dir.resolve("layer.tar");
    Files.write(tar, out.toByteArray());
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER, Digest.sha256(out.toByteArray()), out.size(), Map.of());
    return LayerTree.of(PlainLayerIndexer.open(d, tar, tar, FetchLimits.DEFAULTS).index());
  }

  @Test
  void of_everyKindOfEntry_becomesTheRightNode() throws Exception {
    LayerTree t = tree();
    Node tool = t.lookup("/usr/bin/tool").orElseThrow();
    assertEquals(Kind.REG, tool.kind());
    assertEquals(04755, tool.mode());
    assertEquals(10, tool.size());
    assertArrayEquals(new byte[] {1, 0, 0, 2}, tool.xattrs().get("security.capability"));
    assertEquals(tool, t.lookup("/usr/bin/tool-link").orElseThrow(), "a hard link is the same inode");
    assertEquals(tool.ino(), t.lookup("/usr/bin/tool-link").orElseThrow().ino());
    assertEquals(2, tool.links());
    assertEquals("tool", t.lookup("/usr/bin/sh").orElseThrow().symlinkTarget());
    Node dev = t.lookup("/dev/null").orElseThrow();
    assertEquals(Kind.CHAR, dev.kind());
    assertEquals(1, dev.devMajor());
    assertEquals(3, dev.devMinor());
    assertEquals(Kind.BLOCK, t.lookup("/dev/sda").orElseThrow().kind());
    assertEquals(Kind.FIFO, t.lookup("/run/pipe").orElseThrow().kind());
    assertEquals(01777, t.lookup("/tmp").orElseThrow().mode(), "sticky bit kept");
    assertEquals(7, t.lookup("/dev/null").orElseThrow().uid());
  }

  @Test
  void of_whiteoutsAndOpaqueMarkers_lookAsOverlayfsExpects() throws Exception {
    LayerTree t = tree();
    Node gone = t.lookup("/etc/gone").orElseThrow();
    assertEquals(Kind.CHAR, gone.kind());
    assertEquals(0, gone.devMajor());
    assertEquals(0, gone.devMinor());
    assertTrue(t.lookup("/etc/.wh.gone").isEmpty(), "the whiteout's own name is not shown");
    Node cache = t.lookup("/var/cache").orElseThrow();
    assertArrayEquals("y".getBytes(StandardCharsets.US_ASCII), cache.xattrs().get(LayerTree.OPAQUE_XATTR));
    assertTrue(t.lookup("/var/cache/.wh..wh..opq").isEmpty());
  }

  @Test
  void trustedXattrsALayerCarriesItself_areNotShown_whileDerivedOnesAre() throws Exception {
    LayerTree t = tree();
    Node srv = t.lookup("/srv").orElseThrow();
    assertEquals(java.util.Set.of("user.kept"), srv.xattrs().keySet(), "a layer cannot make its directory opaque");
    assertTrue(t.lookup("/srv/file").orElseThrow().xattrs().isEmpty());
    assertArrayEquals("y".getBytes(StandardCharsets.US_ASCII),
        t.lookup("/var/cache").orElseThrow().xattrs().get(LayerTree.OPAQUE_XATTR), "an opaque marker still is");
  }

  @Test
  void of_missingParents_areImplicitDirectoriesWithCorrectLinkCounts() throws Exception {
    LayerTree t = tree();
    Node usr = t.lookup("/usr").orElseThrow();
    assertEquals(Kind.DIR, usr.kind());
    assertEquals(List.of("bin"), usr.children());
    assertEquals(3, usr.links(), "2 + one subdirectory");
    Node root = t.lookup("/").orElseThrow();
    assertTrue(root.children().containsAll(List.of("usr", "dev", "run", "tmp", "etc", "var", "srv")),
        root.children().toString());
    assertEquals(2 + 7, root.links());
  }

  /** A legal layer with one file 4,096 directories deep (and no directory entries) on a thread with a small stack. */
  @Test
  void of_aPathThousandsOfDirectoriesDeep_buildsWithoutRecursingOnDepth() throws Exception {
    String deepDir = "d/".repeat(4096);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    byte[] content = "deep\n".getBytes(StandardCharsets.US_ASCII);
    TarWriter.writeEntry(out, TarHeader.regular(deepDir + "f", content.length, 0644, Instant.EPOCH), content);
    TarWriter.writeEnd(out);
    Path tar = dir.resolve("deep.tar");
    Files.write(tar, out.toByteArray());
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER, Digest.sha256(out.toByteArray()), out.size(), Map.of());
    var index = PlainLayerIndexer.open(d, tar, tar, FetchLimits.DEFAULTS).index();
    LayerTree[] built = new LayerTree[1];
    Throwable[] failed = new Throwable[1];
    // 128 KiB: far less than any thread flatpull serves from, and far less than a recursion per level needs here.
    Thread t = new Thread(null, () -> {
      try {
        built[0] = LayerTree.of(index);
      } catch (Throwable e) {
        failed[0] = e;
      }
    }, "small-stack", 128 * 1024);
    t.start();
    t.join();
    assertEquals(null, failed[0], () -> "building the tree failed: " + failed[0]);
    LayerTree tree = built[0];
    assertEquals(4096 + 2, tree.size(), "root, 4,096 implicit directories, the file");
    Node file = tree.lookup("/" + deepDir + "f").orElseThrow();
    assertEquals(Kind.REG, file.kind());
    assertEquals(content.length, file.size());
    Node top = tree.lookup("/d").orElseThrow();
    assertEquals(List.of("d"), top.children());
    assertEquals(3, top.links(), "., its entry in the root, and one subdirectory");
    assertEquals(List.of("f"), tree.lookup("/" + deepDir.substring(0, deepDir.length() - 1)).orElseThrow().children());
  }

  private LayerTree treeOf(List<TarHeader> headers) throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (TarHeader x : headers) {
      TarWriter.writeHeader(out, x);
    }
    TarWriter.writeEnd(out);
    Path tar = dir.resolve("order-" + headers.size() + ".tar");
    Files.write(tar, out.toByteArray());
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER, Digest.sha256(out.toByteArray()), out.size(), Map.of());
    return LayerTree.of(PlainLayerIndexer.open(d, tar, tar, FetchLimits.DEFAULTS).index());
  }

  /** What a layer lists later wins, as a tar unpacked in order leaves it; names are compared by their bytes. */
  @Test
  void of_laterEntries_replaceEarlierOnes_asUnpackingInOrderWould() throws Exception {
    LayerTree t = treeOf(List.of(
        h("a/b/file", TarHeader.FIFO, 0600, "", 0, 0, Map.of()),
        h("a/", TarHeader.DIR, 0700, "", 0, 0, Map.of()),
        h("x/y/z", TarHeader.FIFO, 0600, "", 0, 0, Map.of()),
        h("x/y", TarHeader.FIFO, 0644, "", 0, 0, Map.of()),
        h("x/y/after", TarHeader.FIFO, 0600, "", 0, 0, Map.of()),
        h("w/gone/f", TarHeader.FIFO, 0600, "", 0, 0, Map.of()),
        h("w/.wh.gone", TarHeader.REG, 0, "", 0, 0, Map.of()),
        h("é/ü", TarHeader.FIFO, 0600, "", 0, 0, Map.of()),
        h("l", TarHeader.HARDLINK, 0, "é/ü", 0, 0, Map.of())));
    Node a = t.lookup("/a").orElseThrow();
    assertEquals(0700, a.mode(), "a directory listed after its children takes its own attributes");
    assertEquals(List.of("b"), a.children(), "and keeps its children");
    assertEquals(a.ino(), t.child(t.lookup("/").orElseThrow(), "a").orElseThrow().ino());
    assertEquals(Kind.FIFO, t.lookup("/x/y").orElseThrow().kind(), "a file listed where a directory was");
    assertTrue(t.lookup("/x/y/z").isEmpty(), "hides what was under it");
    assertTrue(t.lookup("/x/y/after").isEmpty(), "and nothing can be under a file");
    assertEquals(Kind.CHAR, t.lookup("/w/gone").orElseThrow().kind(), "a whiteout replaces what it names");
    assertTrue(t.lookup("/w/gone/f").isEmpty());
    assertEquals(List.of("gone"), t.lookup("/w").orElseThrow().children());
    Node u = t.lookup("/é/ü").orElseThrow();
    assertEquals(u, t.lookup("/l").orElseThrow(), "a hard link to a name of two-byte characters");
    assertEquals(2, u.links());
    assertEquals(List.of("ü"), t.lookup("/é").orElseThrow().children());
    assertTrue(t.child(t.lookup("/é").orElseThrow(), "u").isEmpty());
    assertEquals(Optional.of("é/ü"), u.path());
  }

  /** Every path and its inode number, walking from the root. */
  private static Map<String, Long> numbers(LayerTree t) {
    Map<String, Long> out = new java.util.TreeMap<>();
    java.util.ArrayDeque<Map.Entry<String, Node>> todo = new java.util.ArrayDeque<>();
    todo.add(Map.entry("", t.lookup("/").orElseThrow()));
    while (!todo.isEmpty()) {
      Map.Entry<String, Node> dir = todo.poll();
      out.put(dir.getKey(), dir.getValue().ino());
      t.forEachChild(dir.getValue(), (name, child) -> {
        String path = dir.getKey() + "/" + name;
        if (child.kind() == Kind.DIR) {
          todo.add(Map.entry(path, child));
        } else {
          out.put(path, child.ino());
        }
        return true;
      });
    }
    return out;
  }

  /**
   * A tree built again from the layer's kept index file numbers every node as the first did: the kernel's node ids
   * can outlive the process that gave them.
   */
  @Test
  void aTreeBuiltAgainFromTheKeptIndex_numbersEveryNodeTheSame() throws Exception {
    LayerTree first = tree();
    var index = PlainLayerIndexer.open(new Descriptor(MediaTypes.OCI_LAYER, Digest.sha256(Files.readAllBytes(
        dir.resolve("layer.tar"))), Files.size(dir.resolve("layer.tar")), Map.of()), dir.resolve("layer.tar"),
        dir.resolve("layer.tar"), FetchLimits.DEFAULTS).index();
    var key = new dev.flatpull.fetcher.layer.LayerIndexFile.Key(Digest.sha256(new byte[] {1}));
    Path kept = dir.resolve("kept");
    try (var ch = java.nio.channels.FileChannel.open(kept, java.nio.file.StandardOpenOption.CREATE_NEW,
        java.nio.file.StandardOpenOption.WRITE)) {
      dev.flatpull.fetcher.layer.LayerIndexFile.write(key, index, ch);
    }
    LayerTree again = LayerTree.of(dev.flatpull.fetcher.layer.LayerIndexFile.read(key, kept));
    Map<String, Long> numbers = numbers(first);
    assertTrue(numbers.size() > 10, numbers.toString());
    assertEquals(numbers, numbers(again));
  }

  @Test
  void makedev_encodesLikeGlibc() {
    assertEquals((1 << 8) | 3, LayerFileSystem.makedev(1, 3));
    assertEquals((259L << 8) | 0x100000L | 0x23, LayerFileSystem.makedev(259, 0x123));
  }
}
