package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A TOC held in memory ({@link TocJson}) reads as the same TOC streamed through Jackson's parser does: the same index,
 * or the same refusal (JSON that breaks the grammar may be worded differently, but both say it is not valid JSON).
 */
class TocJsonTest {
  private static final String D = HostileLayers.DIGEST;
  private static final Digest BLOB = Digest.sha256(new byte[] {2});
  private static final FetchLimits LIMITS = new FetchLimits(4L << 20, 256L << 20, 50, 64L << 20, 64L << 30);

  /** A TOC with every kind of entry and field flatpull reads, and some it does not. */
  static final String VALID = "{\"version\":1,\"tarSplitDigest\":\"\",\"entries\":["
      + "{\"name\":\"usr/\",\"type\":\"dir\",\"mode\":493,\"uid\":0,\"gid\":0,\"userName\":\"root\",\"groupName\":\"root\","
      + "\"modtime\":\"2024-05-01T10:00:00Z\",\"xattrs\":{\"user.a\":\"eHl6\"},\"unknown\":[1,{\"x\":[null,true]}]},"
      + "{\"name\":\"usr/caf\\u00e9 \\\"q\\\" \\\\ \\/ \u65e5\u672c \ud83d\ude00\",\"type\":\"reg\",\"size\":10,"
      + "\"mode\":420.0,\"offset\":100,\"digest\":\"" + D + "\",\"chunkDigest\":\"" + D + "\",\"chunkSize\":\"4\"},"
      + "{\"name\":\"usr/caf\\u00e9 \\\"q\\\" \\\\ \\/ \u65e5\u672c \ud83d\ude00\",\"type\":\"chunk\",\"offset\":200,"
      + "\"chunkOffset\":4,\"chunkSize\":6,\"chunkDigest\":\"" + D + "\",\"innerOffset\":0}, "
      + "{\"name\":\"usr/big\",\"type\":\"reg\",\"size\":4e0,\"offset\":300,\"chunkDigest\":\"" + D + "\","
      + "\"modtime\":\"2024-05-01T10:00:00.5+02:00\",\"linkName\":null,\"devMajor\":-0,\"extra\":\"\\t\"}\n,\r\n"
      + "{\"name\":\"usr/link\",\"type\":\"symlink\",\"linkName\":\"big\",\"uid\":1000,\"gid\":\"1000\"},"
      + "{\"name\":\"usr/hard\",\"type\":\"hardlink\",\"linkName\":\"usr/big\"},"
      + "{\"name\":\"dev/null\",\"type\":\"char\",\"devMajor\":1,\"devMinor\":3,\"userName\":true},"
      + "{\"name\":\"zeros\",\"type\":\"reg\",\"size\":0}"
      + "],\"ignored\":{\"deep\":[[[]]]}}";

  static List<String> documents() {
    List<String> all = new ArrayList<>(List.of(
        VALID,
        "\ufeff" + VALID,
        "{}",
        "{\"version\":1}",
        "{\"version\":1,\"entries\":null}",
        "{\"version\":1,\"entries\":{}}",
        "{\"version\":1,\"entries\":[null]}",
        "{\"version\":1,\"entries\":[1]}",
        "{\"version\":1,\"entries\":[{}]}",
        "{\"version\":null,\"entries\":[]}",
        "{\"version\":\"1\",\"entries\":[]}",
        "{\"version\":1.0,\"entries\":[]}",
        "{\"version\":99999999999,\"entries\":[]}",
        "{\"version\":2,\"entries\":[]}",
        "[]",
        "\"x\"",
        "x",
        "0\"",
        "0 \"",
        "nul",
        "",
        "{\"version\":1,\"entries\":[]}trailing",
        "{\"version\":1,\"entries\":[],}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\"},]}",
        "{\"version\":01,\"entries\":[]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":{}}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":true}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":\"x\"}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":1e40}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":99999999999999999999}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"uid\":-9223372036854775808}]}",
        "{\"version\":1,\"entries\":[{\"name\":[],\"type\":\"dir\"}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"xattrs\":[]}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"xattrs\":{\"k\":{}}}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"xattrs\":{\"k\":\"%%\"}}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\\u0000b\",\"type\":\"dir\"}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\\x\",\"type\":\"dir\"}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\\u12\",\"type\":\"dir\"}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\tb\",\"type\":\"dir\"}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"unknown\":" + "[".repeat(1100) + "]".repeat(1100)
            + "}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"unknown\":" + "[".repeat(100) + "]".repeat(100)
            + "}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\"}" + ",{\"name\":\"a\",\"type\":\"dir\"}".repeat(60)
            + "]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":-},{}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":1.},{}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":1e},{}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":tru}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\",\"mode\":nulls}]}",
        "{\"version\":1 \"entries\":[]}",
        "{\"version\" 1,\"entries\":[]}",
        "{version:1,\"entries\":[]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"type\":\"dir\"}"));
    return all;
  }

  @ParameterizedTest
  @MethodSource("documents")
  void heldAndStreamed_readTheSame(String json) {
    same(json.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void invalidUtf8_isRefusedHeldAsStreamed() {
    byte[] json = ("{\"version\":1,\"entries\":[{\"name\":\"a\u00e9\",\"type\":\"dir\"}]}")
        .getBytes(StandardCharsets.UTF_8);
    int at = indexOf(json, (byte) 0xc3);
    json[at + 1] = 'x'; // a lead byte without its continuation
    same(json);
    assertTrue(outcome(json, true).startsWith("LayerFormatException"), outcome(json, true));
  }

  /** Mutants of a valid TOC (bytes dropped, replaced, inserted; cut short): the two readers agree on each. */
  @Test
  void mutantsOfAValidToc_readTheSameHeldAndStreamed() {
    byte[] valid = VALID.getBytes(StandardCharsets.UTF_8);
    byte[] alphabet = "{}[]\":,\\ 0123456789-+.eEtrufalsn/xu\t\n".getBytes(StandardCharsets.US_ASCII);
    Random random = new Random(20261207);
    int refused = 0;
    for (int n = 0; n < 3000; n++) {
      byte[] m = valid.clone();
      for (int edits = 1 + random.nextInt(3); edits > 0 && m.length > 0; edits--) {
        int at = random.nextInt(m.length);
        byte x = random.nextInt(10) == 0 ? (byte) (0x80 + random.nextInt(128)) : alphabet[random.nextInt(alphabet.length)];
        m = switch (random.nextInt(4)) {
          case 0 -> concat(java.util.Arrays.copyOf(m, at), java.util.Arrays.copyOfRange(m, at + 1, m.length));
          case 1 -> {
            m[at] = x;
            yield m;
          }
          case 2 -> concat(concat(java.util.Arrays.copyOf(m, at), new byte[] {x}), java.util.Arrays.copyOfRange(m, at, m.length));
          default -> java.util.Arrays.copyOf(m, at);
        };
      }
      if (!same(m).startsWith("index")) {
        refused++;
      }
    }
    // Most mutants break the TOC somewhere; some still read (a changed digit in a mode, say).
    assertTrue(refused > 1500 && refused < 3000, refused + " of 3000 refused");
  }

  @Test
  void theValidToc_readsWithEveryField() {
    String index = same(VALID.getBytes(StandardCharsets.UTF_8));
    assertTrue(index.contains("usr/caf\u00e9 \"q\" \\ / \u65e5\u672c \ud83d\ude00|REG|10|420|"), index);
    assertTrue(index.contains("user.a=" + Base64.getEncoder().encodeToString("xyz".getBytes())), index);
    assertTrue(index.contains("usr/link|SYMLINK|0|0|1000|1000|"), index);
    assertTrue(index.contains("dev/null|CHAR|0|0|0|0|true|"), index);
  }

  /** Asserts both readers' outcome is the same; returns it. */
  private static String same(byte[] json) {
    String held = outcome(json, true);
    String streamed = outcome(json, false);
    boolean heldSyntax = held.contains("not valid JSON");
    boolean streamedSyntax = streamed.contains("not valid JSON");
    if (heldSyntax || streamedSyntax) {
      assertEquals(streamed.substring(0, streamed.indexOf(':')), held.substring(0, held.indexOf(':')),
          "held: " + held + "\nstreamed: " + streamed + "\nof " + new String(json, StandardCharsets.UTF_8));
      assertEquals(streamedSyntax, heldSyntax,
          "held: " + held + "\nstreamed: " + streamed + "\nof " + new String(json, StandardCharsets.UTF_8));
    } else {
      assertEquals(streamed, held, "of " + new String(json, StandardCharsets.UTF_8));
    }
    return held;
  }

  static String outcome(byte[] json, boolean held) {
    TocParser.JsonSource source = held ? TocParser.held(json) : () -> new ByteArrayInputStream(json);
    try {
      return describe(TocParser.parse(source, Optional.empty(), "layer", LayerFormat.ESTARGZ, BLOB, Optional.empty(),
          ChunkCompression.GZIP, 1L << 20, LIMITS, held ? Integer.MAX_VALUE : 0));
    } catch (IOException | RuntimeException e) {
      return e.getClass().getSimpleName() + ": " + e.getMessage();
    }
  }

  /** Every part of {@code index} a reader uses, as text. */
  static String describe(LayerIndex index) {
    StringBuilder out = new StringBuilder("index: ");
    out.append(index.prioritized()).append('\n');
    for (LayerEntry e : index.entries()) {
      out.append(e.name()).append('|').append(e.type()).append('|').append(e.size()).append('|').append(e.mode())
          .append('|').append(e.uid()).append('|').append(e.gid()).append('|').append(e.userName()).append('|')
          .append(e.groupName()).append('|').append(e.modTime()).append('|').append(e.linkName()).append('|')
          .append(e.devMajor()).append(',').append(e.devMinor()).append('|').append(e.digest()).append('|')
          .append(e.chunks());
      e.xattrs().forEach((k, v) -> out.append('|').append(k).append('=').append(Base64.getEncoder().encodeToString(v)));
      out.append('\n');
    }
    return out.toString();
  }

  private static byte[] concat(byte[] a, byte[] b) {
    byte[] out = java.util.Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }

  private static int indexOf(byte[] b, byte x) {
    for (int i = 0; i < b.length; i++) {
      if (b[i] == x) {
        return i;
      }
    }
    return -1;
  }
}
