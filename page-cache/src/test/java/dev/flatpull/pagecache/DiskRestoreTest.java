package dev.flatpull.pagecache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.github.benmanes.caffeine.cache.Caffeine;
import dev.flatpull.config.CacheSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.core.VerifiedContent;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A cache reopened over what an earlier process stored, while its restore (the listing of every stored file) has not
 * run: the restore is held until the test releases it, as on a node whose cache holds more files than a start can wait
 * to list.
 */
class DiskRestoreTest {
  private static final int ENTRY = 100_000;

  @TempDir Path dir;
  private final Random random = new Random(11);
  private final List<PageCache> opened = new ArrayList<>();

  @AfterEach
  void close() throws IOException {
    for (PageCache c : opened) {
      c.close();
    }
  }

  /** Stores {@code n} entries as an earlier process, oldest first by modification time (a minute apart). */
  private List<byte[]> storedBefore(int n) throws IOException {
    PageCache before = PageCache.open(dir, new CacheSettings(Optional.empty(), 0, 1L << 30, Duration.ofSeconds(1)));
    List<byte[]> stored = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      byte[] b = new byte[ENTRY];
      random.nextBytes(b);
      before.put(Digest.sha256(b), b);
      stored.add(b);
    }
    before.close();
    long now = System.currentTimeMillis();
    for (int i = 0; i < n; i++) {
      Files.setLastModifiedTime(dir.resolve("sha256").resolve(Digest.sha256(stored.get(i)).hex()),
          FileTime.fromMillis(now - (n - i) * 60_000L));
    }
    return stored;
  }

  /** A held restore: run when the test says. */
  private static final class HeldRestore implements java.util.concurrent.Executor {
    private Runnable task;

    @Override
    public void execute(Runnable command) {
      task = command;
    }

    void release() {
      task.run();
    }
  }

  private PageCache reopen(long budget, HeldRestore restore) throws IOException {
    PageCache c = new PageCache(Caffeine.newBuilder().maximumWeight(0).weigher((Digest d, byte[] b) -> b.length)
        .build(), DiskTier.open(dir, budget, restore), Duration.ofSeconds(1), PageCache.WRITE_BEHIND_BYTES,
        PageCache.writerThread());
    opened.add(c);
    return c;
  }

  @Test
  void whatAnEarlierProcessStored_isServedBeforeTheRestoreListedIt_andCountedOnce() throws Exception {
    List<byte[]> stored = storedBefore(20);
    HeldRestore restore = new HeldRestore();
    PageCache cache = reopen(1L << 30, restore);

    for (byte[] b : stored) {
      assertTrue(cache.contains(Digest.sha256(b)), "found on disk before the restore ran");
    }
    byte[] read = stored.get(7);
    assertArrayEquals(read, cache.get(Digest.sha256(read)).orElseThrow());
    assertEquals(1, cache.stats().diskHits());
    assertEquals(1, cache.stats().diskEntries(), "only what was read is known yet");
    byte[] other = new byte[ENTRY];
    random.nextBytes(other);
    assertFalse(cache.contains(Digest.sha256(other)));
    assertEquals(Optional.empty(), cache.get(Digest.sha256(other)), "a miss is a miss while restoring");
    // Filling content that is already on disk writes nothing.
    assertEquals(Optional.empty(), cache.reserve(Digest.sha256(stored.get(3))));

    restore.release();
    assertEquals(20, cache.stats().diskEntries());
    assertEquals(20L * ENTRY, cache.stats().diskBytes(), "the entry read while restoring is not counted twice");
    assertArrayEquals(stored.get(19), cache.get(Digest.sha256(stored.get(19))).orElseThrow());
  }

  @Test
  void anEntryReadWhileRestoring_isNewerThanEverythingTheRestoreFinds_andTheBudgetHoldsAfterIt() throws Exception {
    List<byte[]> stored = storedBefore(10);
    HeldRestore restore = new HeldRestore();
    // Room for 5 entries: the restore finds 10, and evicts down to 90 % of the budget (4 entries).
    PageCache cache = reopen(5L * ENTRY, restore);
    byte[] oldest = stored.get(0);
    assertArrayEquals(oldest, cache.get(Digest.sha256(oldest)).orElseThrow());

    restore.release();
    assertTrue(cache.stats().diskBytes() <= 5L * ENTRY, "within budget after the restore: "
        + cache.stats().diskBytes());
    assertEquals(4, cache.stats().diskEntries());
    assertTrue(cache.contains(Digest.sha256(oldest)), "read since the open: kept although stored first");
    for (int i = 7; i < 10; i++) {
      assertTrue(cache.contains(Digest.sha256(stored.get(i))), "among the newest on disk: kept (" + i + ")");
    }
    for (int i = 1; i < 7; i++) {
      assertFalse(cache.contains(Digest.sha256(stored.get(i))), "older on disk: evicted (" + i + ")");
      assertFalse(Files.exists(dir.resolve("sha256").resolve(Digest.sha256(stored.get(i)).hex())));
    }
  }

  @Test
  void aCacheThatMayListLater_listsOnlyOnceAllowed_andServesMeanwhile() throws Exception {
    List<byte[]> stored = storedBefore(5);
    java.util.concurrent.CompletableFuture<Void> mayList = new java.util.concurrent.CompletableFuture<>();
    PageCache cache = PageCache.open(dir, new CacheSettings(Optional.empty(), 0, 1L << 30, Duration.ofSeconds(1)),
        mayList);
    opened.add(cache);
    Thread.sleep(200);
    assertEquals(0, cache.stats().diskEntries(), "not listed before it may be");
    assertArrayEquals(stored.get(2), cache.get(Digest.sha256(stored.get(2))).orElseThrow(), "but served");

    mayList.complete(null);
    cache.awaitRestored();
    assertEquals(5, cache.stats().diskEntries());
  }

  @Test
  void aStrangerThatCannotBeRemoved_doesNotStopTheRestore() throws Exception {
    List<byte[]> stored = storedBefore(4);
    Path stranger = Files.createDirectories(dir.resolve("sha256").resolve("not-an-entry"));
    Files.writeString(stranger.resolve("inside"), "x");
    // Listed first (the oldest): a restore that stopped there would find nothing.
    Files.setLastModifiedTime(stranger, FileTime.fromMillis(0));
    HeldRestore restore = new HeldRestore();
    PageCache cache = reopen(1L << 30, restore);
    restore.release();
    assertEquals(4, cache.stats().diskEntries(), "every entry found");
    assertEquals(4L * ENTRY, cache.stats().diskBytes());
    assertTrue(Files.exists(stranger.resolve("inside")), "and the stranger left as it was");
    assertArrayEquals(stored.get(0), cache.get(Digest.sha256(stored.get(0))).orElseThrow());
  }

  @Test
  void emptyingTheCache_waitsForTheRestore_andRemovesWhatItFound() throws Exception {
    List<byte[]> stored = storedBefore(6);
    HeldRestore restore = new HeldRestore();
    PageCache cache = reopen(1L << 30, restore);
    byte[] fresh = new byte[ENTRY];
    random.nextBytes(fresh);
    cache.getOrLoad(Digest.sha256(fresh), () -> VerifiedContent.of(fresh));
    cache.awaitWrites();

    Future<PageCache.Emptied> emptied = Executors.newSingleThreadExecutor().submit(cache::empty);
    Thread.sleep(200);
    assertFalse(emptied.isDone(), "emptied before the stored content was known");
    restore.release();
    assertEquals(7, emptied.get(10, TimeUnit.SECONDS).diskEntries());
    for (byte[] b : stored) {
      assertFalse(cache.contains(Digest.sha256(b)));
    }
    try (var left = Files.list(dir.resolve("sha256"))) {
      assertEquals(0, left.count());
    }
  }
}
