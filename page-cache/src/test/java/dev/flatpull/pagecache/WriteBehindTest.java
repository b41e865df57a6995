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
 * The write-behind queue under a producer faster than the disk: a disk that writes nothing until released (its writer
 * holds every write behind a latch), a runtime-image-like stream of reservations, and a FUSE-like read that missed.
 */
class WriteBehindTest {
  private static final int BOUND = 4 << 20;
  private static final int ENTRY = 256 << 10;
  private static final int ENTRIES = 64; // 16 MiB: four times the bound

  @TempDir Path dir;

  @Test
  void aStreamFasterThanTheDisk_waitsAtTheBound_whileAReaderNeverWaitsForTheDisk() throws Exception {
    CountDownLatch diskStalled = new CountDownLatch(1);
    ExecutorService writer = Executors.newSingleThreadExecutor();
    writer.execute(() -> {
      try {
        diskStalled.await();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    PageCache cache = new PageCache(Caffeine.newBuilder().maximumWeight(64L << 20)
        .weigher((Digest d, byte[] b) -> b.length).build(), DiskTier.open(dir, 1L << 30), Duration.ofSeconds(5), BOUND,
        writer);
    Random random = new Random(7);
    List<byte[]> contents = new ArrayList<>();
    for (int i = 0; i < ENTRIES; i++) {
      byte[] b = new byte[ENTRY];
      random.nextBytes(b);
      contents.add(b);
    }
    AtomicInteger filled = new AtomicInteger();
    ExecutorService stream = Executors.newSingleThreadExecutor();
    Future<?> streamed = stream.submit(() -> {
      for (byte[] b : contents) {
        cache.reserve(Digest.sha256(b)).orElseThrow().fill(VerifiedContent.of(b));
        filled.incrementAndGet();
      }
      return null;
    });
    // The producer counts its wait before it blocks: then exactly the bound is queued, not a byte more.
    while (cache.stats().writeBehindWaits() == 0) {
      assertTrue(!streamed.isDone(), "the stream finished without ever waiting for the disk");
      Thread.onSpinWait();
    }
    assertEquals(BOUND, cache.stats().writeBehindBytes(), "bytes queued for the disk at the bound");
    assertEquals(BOUND / ENTRY, filled.get(), "entries the stream filled before it had to wait");
    assertTrue(!streamed.isDone());

    // A reader's miss while the queue is full: served, kept in memory only, never waiting on the stalled disk.
    byte[] read = new byte[ENTRY];
    random.nextBytes(read);
    ExecutorService reader = Executors.newSingleThreadExecutor();
    Future<byte[]> served = reader.submit(() -> cache.getOrLoad(Digest.sha256(read), () -> VerifiedContent.of(read)));
    // Bounded only so that a regression fails instead of hanging: the disk stays stalled until after this.
    assertArrayEquals(read, served.get(30, TimeUnit.SECONDS));
    assertEquals(1, cache.stats().diskWritesSkipped());
    assertEquals(BOUND, cache.stats().writeBehindBytes(), "the reader's content did not join the queue");
    assertArrayEquals(read, cache.get(Digest.sha256(read)).orElseThrow(), "in memory");

    diskStalled.countDown();
    streamed.get(60, TimeUnit.SECONDS);
    cache.awaitWrites();
    CacheStats s = cache.stats();
    assertEquals(0, s.writeBehindBytes());
    assertEquals(ENTRIES, s.diskEntries(), "every streamed entry reached the disk");
    assertEquals(0, s.diskWriteFailures());
    assertTrue(s.writeBehindWaits() >= 1);
    cache.close();
    stream.shutdown();
    reader.shutdown();
  }
}
