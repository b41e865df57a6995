package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import java.io.ByteArrayInputStream;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Optional;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A TOC held in memory (parsed from its array) and one streamed twice (too large to hold) are one parse: the same
 * entries, the same refusals, the digest checked over every byte before anything is built.
 */
class TocSourcesTest {
  private static final String CHUNK = Digest.sha256(new byte[] {1}).toString();
  private static final String TOC = "{\"version\":1,\"entries\":["
      + "{\"name\":\"d\",\"type\":\"dir\",\"mode\":493},"
      + "{\"name\":\"d/f\",\"type\":\"reg\",\"size\":3,\"mode\":420,\"uid\":0,\"offset\":100,\"chunkDigest\":\"" + CHUNK
      + "\"},"
      + "{\"name\":\"d/s\",\"type\":\"symlink\",\"linkName\":\"f\"},"
      + "{\"name\":\"d/h\",\"type\":\"hardlink\",\"linkName\":\"d/f\"}]}";
  private static final int HOLD_ALL = 1 << 20;
  private static final int HOLD_NONE = 0;

  @ParameterizedTest(name = "held up to {0} bytes")
  @ValueSource(ints = {HOLD_ALL, HOLD_NONE})
  void parse_heldOrStreamed_givesTheSameEntries(int heldLimit) throws IOException {
    byte[] json = TOC.getBytes(StandardCharsets.UTF_8);

    LayerIndex index = parse(json, Digest.sha256(json), heldLimit);

    assertEquals(parse(json, Digest.sha256(json), HOLD_ALL).entries().toString(), index.entries().toString());
    assertEquals(4, index.entries().size());
    assertEquals(3, index.entries().stream().filter(e -> e.name().equals("d/f")).findFirst().orElseThrow().size());
  }

  @ParameterizedTest(name = "held up to {0} bytes")
  @ValueSource(ints = {HOLD_ALL, HOLD_NONE})
  void parse_ofTheWrongDigest_isRefusedForItsDigest_evenWhenAlsoMalformed(int heldLimit) {
    byte[] json = TOC.getBytes(StandardCharsets.UTF_8);
    byte[] malformed = TOC.replace("\"dir\"", "\"dir").getBytes(StandardCharsets.UTF_8);
    Digest other = Digest.sha256(new byte[] {2});

    assertThrows(DigestMismatchException.class, () -> parse(json, other, heldLimit));
    assertThrows(DigestMismatchException.class, () -> parse(malformed, other, heldLimit));
    LayerFormatException e = assertThrows(LayerFormatException.class,
        () -> parse(malformed, Digest.sha256(malformed), heldLimit));
    assertTrue(e.getMessage().contains("not valid JSON"), e.getMessage());
  }

  private static LayerIndex parse(byte[] json, Digest verify, int heldLimit) throws IOException {
    Digest blob = Digest.sha256(new byte[0]);
    return TocParser.parse(() -> new ReadOnlyUntilClosed(json), Optional.of(verify), "layer", LayerFormat.ESTARGZ,
        blob, Optional.of(verify), ChunkCompression.GZIP, 1000, FetchLimits.DEFAULTS, heldLimit);
  }

  /** A stream that refuses reads once closed, as a gzip stream does. */
  private static final class ReadOnlyUntilClosed extends FilterInputStream {
    private boolean closed;

    ReadOnlyUntilClosed(byte[] bytes) {
      super(new ByteArrayInputStream(bytes));
    }

    @Override
    public int read() throws IOException {
      check();
      return super.read();
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      check();
      return super.read(b, off, len);
    }

    @Override
    public void close() throws IOException {
      closed = true;
      super.close();
    }

    private void check() throws IOException {
      if (closed) {
        throw new IOException("Stream closed");
      }
    }
  }
}
