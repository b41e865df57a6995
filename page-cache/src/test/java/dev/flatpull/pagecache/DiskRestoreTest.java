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
 * A cache reopened over what an earlier process stored, while its restore (the reading of every pack's index) has not
 * run: the restore is held until the test releases it, as on a node whose disk is slower than anything.
 */
class DiskRestoreTest {
  private static final int ENTRY = 100_000;
  /** Packs that hold one entry each. */
  private static final long SMALL = ENTRY;

  @TempDir Path dir;
  private final Random random = new Random(11);
  private final List<PageCache> opened = new ArrayList<>();

  @AfterEach
  void close() throws IOException {
    for (PageCache c : opened) {
      c.close();
    }
  }

  /**
   * Stores {@code n} entries as an earlier process in packs of {@code packBytes}, then dates its packs a minute apart, oldest
   * first (the order a restart finds them in).
   */
  private List<byte[]> storedBefore(int n, long packBytes) throws IOException {
    PageCache before = new PageCache(Caffeine.newBuilder().maximumWeight(0).weigher((Digest d, byte[] b) -> b.length)
        .build(), DiskTier.open(dir, 1L << 30, packBytes, Runnable::run), Duration.ofSeconds(1),
        PageCache.WRITE_BEHIND_BYTES, PageCache.writerThread());
    List<byte[]> stored = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      byte[] b = new byte[ENTRY];
      random.nextBytes(b);
      before.put(Digest.sha256(b), b);
      stored.add(b);
    }
    before.close();
    List<Path> packs = packs();
    long now = System.currentTimeMillis();
    for (int i = 0; i < packs.size(); i++) {
      Files.setLastModifiedTime(packs.get(i), FileTime.fromMillis(now - (packs.size() - i) * 60_000L));
    }
    return stored;
  }

  /** The pack files, in the order they were made. */
  private List<Path> packs() throws IOException {
    try (var s = Files.list(dir.resolve("packs"))) {
      return s.sorted().toList();
    }
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
  void whatAnEarlierProcessStored_isAMissUntilTheRestoreReadIt_thenServed_andCountedOnce() throws Exception {
    List<byte[]> stored = storedBefore(20, DiskTier.packBytes(1L << 30));
    assertEquals(1, packs().size(), "packed together");
    HeldRestore restore = new HeldRestore();
    PageCache cache = reopen(1L << 30, restore);

    byte[] seven = stored.get(7);
    assertFalse(cache.contains(Digest.sha256(seven)), "not known before its pack's index is read");
    assertEquals(Optional.empty(), cache.get(Digest.sha256(seven)), "a miss while restoring: fetched, never wrong");
    assertArrayEquals(seven, cache.getOrLoad(Digest.sha256(seven), () -> VerifiedContent.of(seven)));
    cache.awaitWrites();
    assertEquals(1, cache.stats().diskEntries(), "only what was stored since the open is known yet");

    restore.release();
    assertEquals(20, cache.stats().diskEntries(), "the entry stored again while restoring is not counted twice");
    for (byte[] b : stored) {
      assertArrayEquals(b, cache.get(Digest.sha256(b)).orElseThrow());
    }
    // Filling content that is on disk writes nothing.
    assertEquals(Optional.empty(), cache.reserve(Digest.sha256(stored.get(3))));
  }

  @Test
  void anEntryStoredWhileRestoring_isNewerThanEverythingTheRestoreFinds_andTheBudgetHoldsAfterIt() throws Exception {
    List<byte[]> stored = storedBefore(10, SMALL);
    assertEquals(10, packs().size(), "a pack per entry");
    long pack = Files.size(packs().get(0));
    HeldRestore restore = new HeldRestore();
    // Room for 5 packs: the restore finds 10, and evicts down to 90 % of the budget (4 packs).
    PageCache cache = reopen(5 * pack, restore);
    assertTrue(DiskTier.packBytes(5 * pack) < ENTRY, "a pack per entry still");
    byte[] fresh = new byte[ENTRY];
    random.nextBytes(fresh);
    cache.put(Digest.sha256(fresh), fresh);
    List<Path> before = packs();

    restore.release();
    assertTrue(cache.stats().diskBytes() <= 5 * pack, "within budget after the restore: " + cache.stats().diskBytes());
    assertEquals(4, cache.stats().diskEntries());
    assertTrue(cache.contains(Digest.sha256(fresh)), "stored since the open: kept although the restore found older");
    for (int i = 7; i < 10; i++) {
      assertTrue(cache.contains(Digest.sha256(stored.get(i))), "among the newest on disk: kept (" + i + ")");
    }
    for (int i = 0; i < 7; i++) {
      assertFalse(cache.contains(Digest.sha256(stored.get(i))), "older on disk: evicted (" + i + ")");
      assertFalse(Files.exists(before.get(i)), "with its pack (" + i + ")");
    }
  }

  @Test
  void aCacheThatMayListLater_listsOnlyOnceAllowed_andServesWhatItStoresMeanwhile() throws Exception {
    List<byte[]> stored = storedBefore(5, DiskTier.packBytes(1L << 30));
    java.util.concurrent.CompletableFuture<Void> mayList = new java.util.concurrent.CompletableFuture<>();
    PageCache cache = PageCache.open(dir, new CacheSettings(Optional.empty(), 0, 1L << 30, Duration.ofSeconds(1)),
        mayList);
    opened.add(cache);
    Thread.sleep(200);
    assertEquals(0, cache.stats().diskEntries(), "not listed before it may be");
    byte[] fresh = new byte[ENTRY];
    random.nextBytes(fresh);
    cache.put(Digest.sha256(fresh), fresh);
    assertArrayEquals(fresh, cache.get(Digest.sha256(fresh)).orElseThrow(), "but serving");

    mayList.complete(null);
    cache.awaitRestored();
    assertEquals(6, cache.stats().diskEntries());
    assertArrayEquals(stored.get(2), cache.get(Digest.sha256(stored.get(2))).orElseThrow());
  }

  @Test
  void aStrangerThatCannotBeRemoved_doesNotStopTheRestore() throws Exception {
    List<byte[]> stored = storedBefore(4, SMALL);
    Path stranger = Files.createDirectories(dir.resolve("packs").resolve("not-a-pack"));
    Files.writeString(stranger.resolve("inside"), "x");
    // Listed first (the oldest): a restore that stopped there would find nothing.
    Files.setLastModifiedTime(stranger, FileTime.fromMillis(0));
    long packBytes = 0;
    for (Path p : packs()) {
      packBytes += Files.isRegularFile(p) ? Files.size(p) : 0;
    }
    HeldRestore restore = new HeldRestore();
    PageCache cache = reopen(1L << 30, restore);
    restore.release();
    assertEquals(4, cache.stats().diskEntries(), "every entry found");
    assertEquals(packBytes, cache.stats().diskBytes());
    assertTrue(Files.exists(stranger.resolve("inside")), "and the stranger left as it was");
    assertArrayEquals(stored.get(0), cache.get(Digest.sha256(stored.get(0))).orElseThrow());
  }

  @Test
  void emptyingTheCache_waitsForTheRestore_andRemovesWhatItFound() throws Exception {
    List<byte[]> stored = storedBefore(6, SMALL);
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
    assertEquals(List.of(), packs());
    assertEquals(0, cache.stats().diskBytes());
  }
}
