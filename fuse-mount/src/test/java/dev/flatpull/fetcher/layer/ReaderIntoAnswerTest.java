package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.fetcher.layer.ContainersStorageWriter.Generation;
import dev.flatpull.fetcher.layer.ContainersStorageWriter.Written;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.pagecache.PageCache;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The read path copying straight into a FUSE answer: a read lands at the answer's index, holes (containers/storage's
 * zeros chunks) are written as zeros with nothing fetched, and nothing outside the read's range is touched. In this
 * package for the zstd:chunked writer and sample tar the fetcher's tests keep package-private.
 */
class ReaderIntoAnswerTest {
  private static final int AT = 40; // where the read starts in the answer, as a FUSE answer starts after its header
  private static final byte FILL = 0x5a;

  @TempDir Path dir;

  @Test
  void aFileWithAZerosChunk_isReadIntoTheAnswerAtItsIndex_fromTheRegistryAndThenFromTheCache() throws Exception {
    SampleTar tar = new SampleTar(5, 300_000);
    Written w = ContainersStorageWriter.write(tar.bytes, Generation.V1_54);
    AtomicLong served = new AtomicLong();
    BlobReader blob = range -> {
      served.addAndGet(range.length());
      return Arrays.copyOfRange(w.blob(), (int) range.offset(), (int) range.end());
    };
    LayerIndex index = ZstdChunkedToc.read(w.descriptor(), blob, FetchLimits.DEFAULTS);
    LayerEntry holes = index.entry("usr/share/holes").orElseThrow();
    assertTrue(holes.chunks().stream().anyMatch(c -> c.stored().isEmpty()), "the file has a zeros chunk");
    byte[] truth = tar.item("usr/share/holes").content();
    try (PageCache cache = PageCache.open(dir.resolve("cache"),
        new CacheSettings(Optional.empty(), 64L << 20, 1L << 30, Duration.ofSeconds(5)))) {
      LayerContentReader reader = new LayerContentReader(new LazyLayer(index, blob, 0), cache, 0,
          new dev.flatpull.fuse.ReadActivity());
      for (String round : new String[] {"fetched", "cached"}) {
        ByteBuffer answer = answer(truth.length);
        assertEquals(truth.length, reader.read(holes, 0, answer, AT, truth.length), round);
        assertRead(answer, truth, 0, truth.length, round);
        // From inside the run of zeros (70,000-90,000) to past it.
        answer = answer(30_000);
        assertEquals(30_000, reader.read(holes, 80_000, answer, AT, 30_000), round);
        assertRead(answer, truth, 80_000, 30_000, round + ", from inside the zeros");
      }
      long fetched = served.get();
      ByteBuffer answer = answer(20_000);
      assertEquals(20_000, reader.read(holes, 70_000, answer, AT, 20_000));
      assertRead(answer, truth, 70_000, 20_000, "the zeros alone");
      assertEquals(fetched, served.get(), "nothing fetched for the zeros");
    }
  }

  private static ByteBuffer answer(int length) {
    ByteBuffer b = ByteBuffer.allocateDirect(AT + length + AT);
    for (int i = 0; i < b.capacity(); i++) {
      b.put(i, FILL);
    }
    b.position(7); // a read writes at its index, whatever the position
    return b;
  }

  private static void assertRead(ByteBuffer answer, byte[] truth, int offset, int length, String what) {
    byte[] got = new byte[length];
    answer.get(AT, got);
    assertArrayEquals(Arrays.copyOfRange(truth, offset, offset + length), got, what);
    for (int i = 0; i < AT; i++) {
      assertEquals(FILL, answer.get(i), what + ": byte " + i + " before the read");
      assertEquals(FILL, answer.get(AT + length + i), what + ": byte " + i + " after the read");
    }
    assertEquals(7, answer.position(), what);
  }
}
