package dev.flatpull.trace;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.Arrays;
import java.util.List;
import java.util.zip.GZIPOutputStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class TraceFileTest {
  @TempDir Path dir;

  static Trace sample() {
    ServiceVersion s = new ServiceVersion("r.example/app:1", "sha256:" + "ab".repeat(32), "linux/amd64",
        List.of("python3", "-c", "import json"), List.of("A"), "/srv", List.of("exit"));
    return new Trace(s, "0.1.0", Instant.parse("2026-11-30T00:00:00Z"), List.of(812L, 790L), List.of(
        new LayerTrace("sha256:" + "cd".repeat(32), List.of("/usr/bin/python3.11", "/usr/lib/libc.so.6"),
            List.of(new PageRun(0, 0, 10, 0, 2), new PageRun(1, 3, 4, 1500, 1)))));
  }

  @Test
  void roundTrip_keepsEverything() throws Exception {
    Path f = dir.resolve("t.fptrace");
    TraceFile.write(sample(), f);
    assertEquals(sample(), TraceFile.read(f));
    assertTrue(Files.size(f) < 1000, "compact: " + Files.size(f));
  }

  @Test
  void aTraceFileOverTheCap_isRefused_compressedOrDecompressed() throws Exception {
    Path f = dir.resolve("t.fptrace");
    TraceFile.write(sample(), f);
    TraceFormatException big = assertThrows(TraceFormatException.class, () -> TraceFile.read(f, 100));
    assertTrue(big.getMessage().contains("more than a trace file may have (100)"), big.getMessage());
    // A gzip bomb: 80 MiB of spaces (then a trace) compress to about 80 KiB.
    Path bomb = dir.resolve("bomb.fptrace");
    try (OutputStream out = new GZIPOutputStream(Files.newOutputStream(bomb))) {
      byte[] spaces = new byte[1 << 20];
      Arrays.fill(spaces, (byte) ' ');
      for (int i = 0; i < 80; i++) {
        out.write(spaces);
      }
      out.write(new ObjectMapper().writeValueAsBytes(TraceFile.toJson(sample())));
    }
    assertTrue(Files.size(bomb) < TraceFile.MAX_BYTES);
    TraceFormatException x = assertThrows(TraceFormatException.class, () -> TraceFile.read(bomb));
    assertTrue(x.getMessage().contains("decompresses to more than a trace may have"), x.getMessage());
  }

  @Test
  void serviceKey_dependsOnEveryPartOfTheServiceVersion() {
    ServiceVersion a = sample().service();
    assertEquals(a.key(), new ServiceVersion("other/name:tag", a.manifestDigest(), a.platform(), a.command(),
        a.environment(), a.workingDirectory(), a.probes()).key(), "the tag is not part of the key, the digest is");
    assertNotEquals(a.key(), new ServiceVersion(a.image(), a.manifestDigest(), a.platform(), List.of("python3"),
        a.environment(), a.workingDirectory(), a.probes()).key());
    assertNotEquals(a.key(), new ServiceVersion(a.image(), a.manifestDigest(), a.platform(), a.command(),
        List.of("B"), a.workingDirectory(), a.probes()).key());
    assertEquals(List.of("A", "TOKEN", "B"), ServiceVersion.names(List.of("A=1", "TOKEN=s3cr=t", "B")),
        "names only: a value is never recorded");
    assertNotEquals(a.key(), new ServiceVersion(a.image(), a.manifestDigest(), a.platform(), a.command(),
        a.environment(), a.workingDirectory(), List.of("tcp://127.0.0.1:80")).key());
    assertNotEquals(new ServiceVersion("i", "d", "p", List.of("ab", "c"), List.of(), "", List.of()).key(),
        new ServiceVersion("i", "d", "p", List.of("a", "bc"), List.of(), "", List.of()).key());
  }

  @Test
  void truncatedFiles_areRejectedWithTheOffset() throws Exception {
    Path f = dir.resolve("t.fptrace");
    TraceFile.write(sample(), f);
    byte[] b = Files.readAllBytes(f);
    Files.write(f, Arrays.copyOf(b, b.length - 20));
    TraceFormatException e = assertThrows(TraceFormatException.class, () -> TraceFile.read(f));
    assertTrue(e.getMessage().contains("byte") && e.getMessage().contains("truncated"), e.getMessage());
  }

  @Test
  void notGzip_newerVersions_editedKeys_andInconsistentTotals_areRejected() throws Exception {
    Path f = dir.resolve("t.fptrace");
    Files.writeString(f, "{}");
    assertTrue(assertThrows(TraceFormatException.class, () -> TraceFile.read(f)).getMessage().contains("not a gzip"));

    ObjectNode json = TraceFile.toJson(sample());
    json.put("version", 99);
    assertTrue(read(json).getMessage().contains("version 99 is not supported"));

    json = TraceFile.toJson(sample());
    ((ObjectNode) json.get("service")).put("workingDirectory", "/elsewhere");
    assertTrue(read(json).getMessage().contains("service.key does not match"));

    json = TraceFile.toJson(sample());
    json.put("pages", 1);
    assertTrue(read(json).getMessage().contains("'pages' says 1"));

    json = TraceFile.toJson(sample());
    ((com.fasterxml.jackson.databind.node.ArrayNode) json.get("layers").get(0).get("runs").get(0)).set(0,
        json.numberNode(7));
    assertTrue(read(json).getMessage().contains("layers[0]"), read(json).getMessage());

    json = TraceFile.toJson(sample());
    json.remove("readyMillis");
    assertTrue(read(json).getMessage().contains("'readyMillis' is missing"));
  }

  private TraceFormatException read(ObjectNode json) throws Exception {
    Path f = dir.resolve("edited.fptrace");
    try (OutputStream out = new GZIPOutputStream(Files.newOutputStream(f))) {
      new ObjectMapper().writeValue(out, json);
    }
    return assertThrows(TraceFormatException.class, () -> TraceFile.read(f));
  }
}
