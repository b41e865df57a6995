package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Overlay semantics of the merged view, over two plain layers indexed locally. */
class MergedLayersTest {
  @TempDir Path dir;
  private MergedLayers merged;

  private Path tar(String name, Object... entries) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (Object o : entries) {
      if (o instanceof TarHeader h) {
        TarWriter.writeHeader(out, h);
      } else {
        String[] file = ((String) o).split("=", 2);
        byte[] content = file[1].getBytes(StandardCharsets.UTF_8);
        TarWriter.writeEntry(out, TarHeader.regular(file[0], content.length, 0644, Instant.EPOCH), content);
      }
    }
    TarWriter.writeEnd(out);
    Path p = dir.resolve(name);
    Files.write(p, out.toByteArray());
    return p;
  }

  private static TarHeader dir(String name) {
    return new TarHeader(name, TarHeader.DIR, 0, 0755, 0, 0, "", "", Instant.EPOCH, "", 0, 0, Map.of());
  }

  private static TarHeader symlink(String name, String target) {
    return new TarHeader(name, TarHeader.SYMLINK, 0, 0777, 0, 0, "", "", Instant.EPOCH, target, 0, 0, Map.of());
  }

  private LazyLayer open(Path tar) throws IOException {
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER, Digest.sha256(Files.readAllBytes(tar)), Files.size(tar), Map.of());
    return PlainLayerIndexer.open(d, tar, tar, FetchLimits.DEFAULTS);
  }

  @BeforeEach
  void layers() throws IOException {
    Path bottom = tar("bottom.tar", dir("etc/"), "etc/a=A", "etc/b=old", dir("dir/"), "dir/x=X", dir("usr/"),
        dir("usr/bin/"), "usr/bin/tool=TOOL", symlink("bin", "usr/bin"), symlink("etc/alias", "/etc/b"),
        symlink("loop", "loop"), dir("gone/"), "gone/file=G");
    Path upper = tar("upper.tar", dir("etc/"), "etc/.wh.a=", "etc/b=new", dir("dir/"), "dir/.wh..wh..opq=",
        "dir/y=Y", ".wh.gone=");
    List<LazyLayer> layers = List.of(open(bottom), open(upper));
    merged = new MergedLayers(2, layers::get);
  }

  private String read(String path) throws IOException {
    MergedLayers.Found f = merged.resolve(path);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    f.layer().copyTo(f.entry(), out);
    return out.toString(StandardCharsets.UTF_8);
  }

  @Test
  void resolve_followsOverlaySemantics() throws IOException {
    org.junit.jupiter.api.Assertions.assertEquals("new", read("/etc/b"));
    org.junit.jupiter.api.Assertions.assertEquals("Y", read("dir/y"));
    org.junit.jupiter.api.Assertions.assertEquals("TOOL", read("/bin/tool"));
    org.junit.jupiter.api.Assertions.assertEquals("new", read("/etc/alias"));
    org.junit.jupiter.api.Assertions.assertEquals("TOOL", read("/usr/../bin/tool"));
  }

  @Test
  void resolve_whiteoutOpaqueAndLoops_areNotFound() {
    assertThrows(FileNotFoundException.class, () -> merged.resolve("/etc/a"));
    assertThrows(FileNotFoundException.class, () -> merged.resolve("/dir/x"));
    assertThrows(FileNotFoundException.class, () -> merged.resolve("/gone/file"));
    assertThrows(FileNotFoundException.class, () -> merged.resolve("/etc/.wh.a"));
    IOException loop = assertThrows(IOException.class, () -> merged.resolve("/loop"));
    org.junit.jupiter.api.Assertions.assertTrue(loop.getMessage().contains("symbolic links"));
  }

  @Test
  void plainLayer_chunksAreVerifiedAgainstTheLocalIndex() throws IOException {
    Path t = tar("one.tar", "f=" + "z".repeat(600_000));
    LazyLayer l = open(t);
    byte[] bytes = Files.readAllBytes(t);
    bytes[1024] ^= 1;
    Files.write(t, bytes);
    LayerEntry f = l.index().entry("f").orElseThrow();
    byte[] buf = new byte[10];
    assertThrows(dev.flatpull.core.DigestMismatchException.class, () -> l.read(f, 0, buf, 0, 10));
    l.read(f, 300_000, buf, 0, 10);
    assertArrayEquals("zzzzzzzzzz".getBytes(StandardCharsets.US_ASCII), buf);
  }
}
