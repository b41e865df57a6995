package dev.flatpull.pagecache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.github.benmanes.caffeine.cache.Caffeine;
import dev.flatpull.core.Digest;
import dev.flatpull.core.VerifiedContent;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The write-behind queue under producers faster than its writer: a writer thread that writes nothing until released
 * (it holds every write behind a latch, as a writer at the lowest CPU priority on a busy node would), a
 * runtime-image-like stream of reservations, the background fetch's content for later, and a FUSE-like read that
 * missed.
 */
class WriteBehindTest {
  private static final int BOUND = 4 << 20;
  private static final int ENTRY = 256 << 10;
  private static final int ENTRIES = 64; // 16 MiB: four times the bound

  @TempDir Path dir;

  private final CountDownLatch writerStalled = new CountDownLatch(1);

  private PageCache cacheWithStalledWriter() throws Exception {
    ExecutorService writer = Executors.newSingleThreadExecutor();
    writer.execute(() -> {
      try {
        writerStalled.await();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    return new PageCache(Caffeine.newBuilder().maximumWeight(64L << 20)
        .weigher((Digest d, byte[] b) -> b.length).build(), DiskTier.open(dir, 1L << 30), Duration.ofSeconds(5), BOUND,
        writer);
  }

  private static List<byte[]> contents(Random random) {
    List<byte[]> contents = new ArrayList<>();
    for (int i = 0; i < ENTRIES; i++) {
      byte[] b = new byte[ENTRY];
      random.nextBytes(b);
      contents.add(b);
    }
    return contents;
  }

  @Test
  void aStreamFasterThanTheWriter_writesPastTheBoundItself_whileAReaderNeverWaitsForTheDisk() throws Exception {
    PageCache cache = cacheWithStalledWriter();
    Random random = new Random(7);
    List<byte[]> contents = contents(random);
    ExecutorService stream = Executors.newSingleThreadExecutor();
    Future<?> streamed = stream.submit(() -> {
      for (byte[] b : contents) {
        cache.reserve(Digest.sha256(b)).orElseThrow().fill(VerifiedContent.of(b));
      }
      return null;
    });
    // Bounded only so that a regression (the stream waiting for the stalled writer) fails instead of hanging.
    streamed.get(60, TimeUnit.SECONDS);
    CacheStats s = cache.stats();
    assertEquals(BOUND, s.writeBehindBytes(), "bytes queued for the writer: the bound, not a byte more");
    assertEquals(ENTRIES - BOUND / ENTRY, s.writeBehindWaits(), "entries that met the full queue");
    assertEquals(ENTRIES - BOUND / ENTRY, s.diskEntries(), "the stream wrote those itself");
    for (byte[] b : contents) {
      assertArrayEquals(b, cache.get(Digest.sha256(b)).orElseThrow());
    }

    // A reader's miss while the queue is full: served, kept in memory only, never waiting on the disk.
    byte[] read = new byte[ENTRY];
    random.nextBytes(read);
    ExecutorService reader = Executors.newSingleThreadExecutor();
    Future<byte[]> served = reader.submit(() -> cache.getOrLoad(Digest.sha256(read), () -> VerifiedContent.of(read)));
    assertArrayEquals(read, served.get(30, TimeUnit.SECONDS));
    assertEquals(1, cache.stats().diskWritesSkipped());
    assertEquals(BOUND, cache.stats().writeBehindBytes(), "the reader's content did not join the queue");
    assertArrayEquals(read, cache.get(Digest.sha256(read)).orElseThrow(), "in memory");

    writerStalled.countDown();
    cache.awaitWrites();
    s = cache.stats();
    assertEquals(0, s.writeBehindBytes());
    assertEquals(ENTRIES, s.diskEntries(), "every streamed entry reached the disk");
    assertEquals(0, s.diskWriteFailures());
    cache.close();
    stream.shutdown();
    reader.shutdown();
  }

  @Test
  void contentForLater_waitsForTheWriterAtTheBound() throws Exception {
    PageCache cache = cacheWithStalledWriter();
    List<byte[]> contents = contents(new Random(11));
    AtomicInteger filled = new AtomicInteger();
    ExecutorService fetch = Executors.newSingleThreadExecutor();
    Future<?> fetched = fetch.submit(() -> {
      for (byte[] b : contents) {
        cache.reserveForLater(Digest.sha256(b)).orElseThrow().fill(VerifiedContent.of(b));
        filled.incrementAndGet();
      }
      return null;
    });
    // The producer counts its wait before it blocks: then exactly the bound is queued, not a byte more.
    while (cache.stats().writeBehindWaits() == 0) {
      assertTrue(!fetched.isDone(), "the fetch finished without ever waiting for the writer");
      Thread.onSpinWait();
    }
    assertEquals(BOUND, cache.stats().writeBehindBytes(), "bytes queued for the writer at the bound");
    assertEquals(BOUND / ENTRY, filled.get(), "entries filled before the fetch had to wait");
    assertEquals(0, cache.stats().diskEntries(), "nothing written by the fetch itself");
    assertTrue(!fetched.isDone());

    writerStalled.countDown();
    fetched.get(60, TimeUnit.SECONDS);
    cache.awaitWrites();
    CacheStats s = cache.stats();
    assertEquals(ENTRIES, s.diskEntries(), "every fetched entry reached the disk");
    assertEquals(0, s.writeBehindBytes());
    assertTrue(s.writeBehindWaits() >= 1);
    cache.close();
    fetch.shutdown();
  }
}
