package dev.flatpull.pagecache;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.core.Await;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.VerifiedContent;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class PageCacheTest {
  @TempDir Path dir;

  @Test
  void theCachesOwnThreads_theWriterAndTheListing_comeFromTheFactoryItIsGiven() throws Exception {
    List<String> made = java.util.Collections.synchronizedList(new ArrayList<>());
    byte[] b = "written behind".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    try (PageCache cache = PageCache.open(dir, CacheSettings.DEFAULTS,
        java.util.concurrent.CompletableFuture.completedFuture(null), name -> r -> {
          made.add(name);
          Thread t = new Thread(r, name);
          t.setDaemon(true);
          return t;
        })) {
      assertArrayEquals(b, cache.getOrLoad(Digest.sha256(b), () -> v(b)));
      cache.awaitWrites();
      assertEquals(1, cache.stats().diskEntries(), "written by the factory's writer");
    }
    assertTrue(made.contains("flatpull-page-cache-writer"), made.toString());
    assertTrue(made.contains("flatpull-page-cache-restore"), made.toString());
  }
  private final Random random = new Random(42);

  /** Content as a verifying producer hands it over. */
  private static VerifiedContent v(byte[] b) {
    return VerifiedContent.of(b);
  }

  private byte[] bytes(int n) {
    byte[] b = new byte[n];
    random.nextBytes(b);
    return b;
  }

  private final List<PageCache> opened = new ArrayList<>();

  private PageCache open(long memory, long disk, Duration wait) throws IOException {
    PageCache c = PageCache.open(dir, new CacheSettings(Optional.empty(), memory, disk, wait));
    opened.add(c);
    return c;
  }

  @org.junit.jupiter.api.AfterEach
  void closeCaches() throws IOException {
    // Pending disk writes must finish before the temporary directory is deleted.
    for (PageCache c : opened) {
      c.close();
    }
  }

  private PageCache open() throws IOException {
    return open(1 << 20, 1L << 30, Duration.ofSeconds(5));
  }

  @Test
  void theCache_isTheOwnersOnly_itsDirectories0700_itsEntries0600() throws IOException {
    byte[] b = bytes(5_000);
    PageCache cache = open();
    cache.put(Digest.sha256(b), b);
    cache.awaitWrites();
    assertEquals("rwx------", java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(dir)));
    try (var walk = Files.walk(dir)) {
      for (java.nio.file.Path p : walk.toList()) {
        String mode = java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(p));
        assertEquals(Files.isDirectory(p) ? "rwx------" : "rw-------", mode, p.toString());
      }
    }
  }

  @Test
  void getOrLoad_writesBehind_butTheEntryIsOnDiskOnceWritesAreAwaited() throws IOException {
    byte[] b = bytes(20_000);
    PageCache cache = open();
    assertArrayEquals(b, cache.getOrLoad(Digest.sha256(b), () -> v(b)));
    cache.awaitWrites();
    assertEquals(1, cache.stats().diskEntries());
    assertArrayEquals(b, open().get(Digest.sha256(b)).orElseThrow(), "a restarted process finds it");
  }

  /**
   * Loaded content is visible from the moment getOrLoad returns, even with no memory tier to hold it while its disk
   * write is queued: otherwise a second image reading the same content in that window fetched it again.
   */
  @Test
  void getOrLoad_withoutAMemoryTier_isVisibleBeforeItsDiskWriteCompletes() throws IOException {
    PageCache cache = open(0, 1L << 30, Duration.ofSeconds(5));
    AtomicInteger loads = new AtomicInteger();
    for (int i = 0; i < 20; i++) {
      byte[] b = bytes(1 << 20);
      Digest d = Digest.sha256(b);
      cache.getOrLoad(d, () -> {
        loads.incrementAndGet();
        return v(b);
      });
      assertTrue(cache.reserve(d).isEmpty(), "stored content cannot be reserved again");
      assertArrayEquals(b, cache.get(d).orElseThrow(() -> new AssertionError("stored content missed")));
      assertArrayEquals(b, cache.getOrLoad(d, () -> {
        loads.incrementAndGet();
        return v(b);
      }));
    }
    assertEquals(20, loads.get(), "each content loaded once");
  }

  @Test
  void put_thenGet_servesFromMemoryThenDiskAfterRestart() throws IOException {
    byte[] b = bytes(10_000);
    Digest d = Digest.sha256(b);
    PageCache cache = open();
    cache.put(d, b);
    assertArrayEquals(b, cache.get(d).orElseThrow());
    assertEquals(1, cache.stats().memoryHits());

    PageCache restarted = open();
    assertArrayEquals(b, restarted.get(d).orElseThrow());
    assertEquals(1, restarted.stats().diskHits());
    assertEquals(1, restarted.stats().diskEntries());
  }

  @Test
  void empty_removesEveryEntryFromMemoryAndDisk_andLeavesAReservationInFlightToLand() throws Exception {
    PageCache cache = open();
    List<byte[]> stored = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      byte[] b = bytes(30_000);
      cache.getOrLoad(Digest.sha256(b), () -> v(b)); // written behind
      stored.add(b);
    }
    byte[] later = bytes(1000);
    Reservation inFlight = cache.reserve(Digest.sha256(later)).orElseThrow();

    PageCache.Emptied e = cache.empty();

    assertEquals(5, e.diskEntries(), "the queued writes were waited for, then removed");
    assertEquals(5 * (30_000 + PackFile.HEADER), e.diskBytes(), "their pack's bytes");
    assertEquals(0, cache.stats().diskEntries());
    assertEquals(0, cache.stats().diskBytes());
    for (byte[] b : stored) {
      assertFalse(cache.contains(Digest.sha256(b)));
      AtomicInteger loads = new AtomicInteger();
      assertArrayEquals(b, cache.getOrLoad(Digest.sha256(b), () -> {
        loads.incrementAndGet();
        return v(b);
      }));
      assertEquals(1, loads.get(), "the next read goes to its producer");
    }
    cache.awaitWrites();
    assertEquals(5, cache.stats().diskEntries(), "only the reloaded entries are on disk");
    assertEquals(5 * (30_000 + PackFile.HEADER), cache.stats().diskBytes());
    inFlight.fill(v(later));
    assertArrayEquals(later, cache.get(Digest.sha256(later)).orElseThrow(), "the reservation still landed");
    cache.awaitWrites();
    assertArrayEquals(later, open().get(Digest.sha256(later)).orElseThrow(), "and reached the disk");
  }

  @Test
  void put_contentNotMatchingTheDigest_isRefusedAndNotStored() throws IOException {
    PageCache cache = open();
    Digest d = Digest.sha256(bytes(10));
    assertThrows(DigestMismatchException.class, () -> cache.put(d, bytes(10)));
    assertEquals(Optional.empty(), cache.get(d));
    assertEquals(0, cache.stats().diskEntries());
  }

  /** The one pack file of a cache that wrote little. */
  private Path onlyPack() throws IOException {
    try (var packs = Files.list(dir.resolve("packs"))) {
      List<Path> all = packs.toList();
      assertEquals(1, all.size(), all.toString());
      return all.get(0);
    }
  }

  private static int indexOf(byte[] haystack, byte[] needle) {
    outer:
    for (int i = 0; i + needle.length <= haystack.length; i++) {
      for (int j = 0; j < needle.length; j++) {
        if (haystack[i + j] != needle[j]) {
          continue outer;
        }
      }
      return i;
    }
    throw new AssertionError("content not found in the pack");
  }

  @Test
  void get_flippedOrZeroedContentOnDisk_isDiscardedNotServed_andAPackCutShortLosesOnlyItsTail() throws IOException {
    byte[] a = bytes(5000);
    byte[] b = bytes(5000);
    byte[] c = bytes(5000);
    PageCache cache = open();
    cache.put(Digest.sha256(a), a);
    cache.put(Digest.sha256(b), b);
    cache.put(Digest.sha256(c), c);
    cache.close();
    opened.remove(cache);
    Path pack = onlyPack();
    byte[] raw = Files.readAllBytes(pack);
    raw[indexOf(raw, a) + 100] ^= 1;
    java.util.Arrays.fill(raw, indexOf(raw, b), indexOf(raw, b) + b.length, (byte) 0);
    Files.write(pack, raw);
    assertEquals(new PageCache.Checked(1, 2), PageCache.check(dir), "a check counts them, changing nothing");
    assertArrayEquals(raw, Files.readAllBytes(pack));

    PageCache restarted = open();
    restarted.awaitRestored();
    assertEquals(3, restarted.stats().diskEntries(), "the pack's index names all three");
    assertEquals(Optional.empty(), restarted.get(Digest.sha256(a)));
    assertEquals(Optional.empty(), restarted.get(Digest.sha256(b)));
    assertArrayEquals(c, restarted.get(Digest.sha256(c)).orElseThrow(), "an intact entry beside them is served");
    assertEquals(2, restarted.stats().corruptDiscarded());
    assertEquals(1, restarted.stats().diskEntries(), "corrupt entries are forgotten");
    assertArrayEquals(a, restarted.getOrLoad(Digest.sha256(a), () -> v(a)), "and can be stored again");
    restarted.close();
    opened.remove(restarted);

    // What a power loss can leave of a pack written but not yet on the disk: cut short, its index gone with its tail.
    Files.write(pack, java.util.Arrays.copyOf(raw, indexOf(raw, c) + 1000));
    PageCache cut = open();
    cut.awaitRestored();
    assertEquals(2, cut.stats().diskEntries(), "read record by record up to the one cut short");
    assertEquals(Optional.empty(), cut.get(Digest.sha256(c)), "which is a miss, not an error");
    assertEquals(Optional.empty(), cut.get(Digest.sha256(b)), "and still no corrupt byte is served");
    assertArrayEquals(a, cut.get(Digest.sha256(a)).orElseThrow(), "while what the restart stored again is");
  }

  @Test
  void open_leftoverTemporaryFiles_strangersAndTheEarlierLayout_areCleanedUp() throws IOException {
    Files.createDirectories(dir.resolve("tmp"));
    Files.createDirectories(dir.resolve("packs"));
    Files.createDirectories(dir.resolve("sha256"));
    Files.write(dir.resolve("tmp").resolve("half-written"), new byte[100]);
    Files.write(dir.resolve("packs").resolve("not-a-pack"), new byte[100]);
    byte[] old = bytes(100);
    Files.write(dir.resolve("sha256").resolve(Digest.sha256(old).hex()), old);
    PageCache cache = open();
    cache.awaitRestored();
    assertEquals(0, Files.list(dir.resolve("tmp")).count());
    assertEquals(0, Files.list(dir.resolve("packs")).count());
    assertFalse(Files.exists(dir.resolve("sha256")), "a file per entry was the earlier layout: removed");
    assertEquals(0, cache.stats().diskEntries());
    assertEquals(Optional.empty(), cache.get(Digest.sha256(old)), "its content is fetched again");
  }

  @Test
  void put_beyondTheDiskBudget_evictsLeastRecentlyUsed() throws IOException {
    PageCache cache = open(0, 1_000_000, Duration.ofSeconds(1));
    List<byte[]> all = new ArrayList<>();
    byte[] keep = bytes(100_000);
    cache.put(Digest.sha256(keep), keep);
    for (int i = 0; i < 20; i++) {
      byte[] b = bytes(100_000);
      all.add(b);
      cache.put(Digest.sha256(b), b);
      assertTrue(cache.get(Digest.sha256(keep)).isPresent(), "a recently used entry survives eviction (round " + i + ")");
    }
    assertTrue(cache.stats().diskBytes() <= 1_000_000, "within budget: " + cache.stats().diskBytes());
    assertTrue(cache.stats().evictions() >= 10, "evicted: " + cache.stats().evictions());
    assertEquals(Optional.empty(), cache.get(Digest.sha256(all.get(0))));
    assertTrue(cache.get(Digest.sha256(all.get(19))).isPresent());
  }

  @Test
  void put_beyondTheDiskBudget_evictsWholePacks_leastRecentlyUsedFirst_andKeepsToTheBudget() throws IOException {
    long budget = 2_000_000;
    assertEquals(64 << 10, DiskTier.packBytes(budget), "the smallest pack: six entries each here");
    PageCache cache = open(0, budget, Duration.ofSeconds(1));
    byte[] keep = bytes(10_000);
    cache.put(Digest.sha256(keep), keep);
    List<byte[]> all = new ArrayList<>();
    for (int i = 0; i < 400; i++) {
      byte[] b = bytes(10_000);
      all.add(b);
      cache.put(Digest.sha256(b), b);
      assertTrue(cache.stats().diskBytes() <= budget, "within budget: " + cache.stats().diskBytes());
      if (i % 50 == 0) {
        assertArrayEquals(keep, cache.get(Digest.sha256(keep)).orElseThrow(), "read now and then: its pack is kept");
      }
    }
    long entries = cache.stats().diskEntries();
    assertTrue(entries >= 150 && entries < 200, "most of the budget holds entries: " + entries);
    assertEquals(401 - entries, cache.stats().evictions(), "every entry of an evicted pack counted");
    assertEquals(Optional.empty(), cache.get(Digest.sha256(all.get(10))), "the least recent pack went");
    // Eviction takes packs whole: an entry written beside one read since is kept with it.
    assertArrayEquals(all.get(0), cache.get(Digest.sha256(all.get(0))).orElseThrow());
    assertArrayEquals(all.get(399), cache.get(Digest.sha256(all.get(399))).orElseThrow());
    assertEquals(cache.stats().diskBytes(), packBytes(), "the count is what the packs hold");
  }

  @Test
  void aReadInterruptedOnOneThread_doesNotCloseThePackForTheOthers() throws Exception {
    byte[] b = bytes(5000);
    PageCache writer = open();
    writer.put(Digest.sha256(b), b);
    writer.close();
    PageCache cache = open(0, 1L << 30, Duration.ofSeconds(1));
    cache.awaitRestored();
    Thread.currentThread().interrupt();
    try {
      // An interrupted thread's read closes the channel it reads (FileChannel's contract).
      assertThrows(java.io.InterruptedIOException.class, () -> cache.get(Digest.sha256(b)));
    } finally {
      Thread.interrupted();
    }
    Future<Optional<byte[]>> other = Executors.newSingleThreadExecutor().submit(() -> cache.get(Digest.sha256(b)));
    assertArrayEquals(b, other.get(10, TimeUnit.SECONDS).orElseThrow(), "another thread reads it again");
    assertEquals(1, cache.stats().diskEntries());
  }

  private static void keep(PageCache cache, String name, byte[] content) throws IOException {
    cache.namedFiles().keep(name, ch -> ch.write(java.nio.ByteBuffer.wrap(content)));
  }

  @Test
  void namedFiles_countInTheDiskBudget_evictedWithContentByRecency_andFoundAfterRestart() throws IOException {
    PageCache cache = open(0, 1_000_000, Duration.ofSeconds(1));
    keep(cache, "layer-index-a", new byte[300_000]);
    assertEquals(300_000, cache.stats().diskBytes(), "a kept file counts in the disk's bytes");
    for (int i = 0; i < 20; i++) {
      byte[] b = bytes(100_000);
      cache.put(Digest.sha256(b), b);
      assertTrue(cache.namedFiles().find("layer-index-a").isPresent(), "a file found recently survives (round " + i + ")");
    }
    assertTrue(cache.stats().diskBytes() <= 1_000_000, "within budget: " + cache.stats().diskBytes());
    keep(cache, "layer-index-b", new byte[200_000]);
    for (int i = 0; i < 10; i++) {
      byte[] b = bytes(100_000);
      cache.put(Digest.sha256(b), b);
      assertTrue(cache.namedFiles().find("layer-index-a").isPresent(), "still found, still kept (round " + i + ")");
    }
    assertEquals(Optional.empty(), cache.namedFiles().find("layer-index-b"), "one not found since is evicted");
    assertTrue(cache.stats().diskBytes() <= 1_000_000, "within budget: " + cache.stats().diskBytes());
    cache.close();
    opened.remove(cache);

    PageCache again = open(0, 1_000_000, Duration.ofSeconds(1));
    Path a = again.namedFiles().find("layer-index-a").orElseThrow();
    assertArrayEquals(new byte[300_000], Files.readAllBytes(a), "kept across a restart");
    assertEquals("rw-------", java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(a)));
    long before = again.stats().diskBytes();
    again.namedFiles().remove("layer-index-a");
    // Counted before a find, which would also notice the file gone.
    assertEquals(before - 300_000, again.stats().diskBytes(), "a removed file's bytes leave the disk's count");
    assertEquals(Optional.empty(), again.namedFiles().find("layer-index-a"));
    assertFalse(Files.exists(a));
  }

  @Test
  void namedFiles_keptBeyondTheBudget_evictTheLeastRecent_andARestartKnowsWhichThatIs() throws Exception {
    PageCache cache = open(0, 1_000_000, Duration.ofSeconds(1));
    keep(cache, "old", new byte[400_000]);
    // A restart orders what it finds by modification time: make the order plain to a coarse file-system clock.
    Files.setLastModifiedTime(cache.namedFiles().find("old").orElseThrow(),
        java.nio.file.attribute.FileTime.fromMillis(System.currentTimeMillis() - 60_000));
    keep(cache, "new", new byte[400_000]);
    cache.close();
    opened.remove(cache);

    PageCache again = open(0, 1_000_000, Duration.ofSeconds(1));
    assertEquals(800_000, again.stats().diskBytes());
    keep(again, "newest", new byte[400_000]);
    assertTrue(again.stats().diskBytes() <= 1_000_000, "kept within budget: " + again.stats().diskBytes());
    assertEquals(Optional.empty(), again.namedFiles().find("old"), "the least recent goes");
    assertTrue(again.namedFiles().find("new").isPresent() && again.namedFiles().find("newest").isPresent());
  }

  @Test
  void namedFiles_replacedWhole_andNamesThatLeaveTheirDirectoryRefused() throws IOException {
    PageCache cache = open();
    keep(cache, "x", new byte[1000]);
    keep(cache, "x", new byte[10]);
    assertEquals(10, Files.size(cache.namedFiles().find("x").orElseThrow()));
    assertEquals(10, cache.stats().diskBytes(), "the replaced file's bytes are not counted twice");
    assertThrows(IOException.class, () -> cache.namedFiles().keep("y", ch -> {
      ch.write(java.nio.ByteBuffer.wrap(new byte[50]));
      throw new IOException("disk full");
    }));
    assertEquals(Optional.empty(), cache.namedFiles().find("y"), "a file whose writing failed is not kept");
    assertEquals(0, Files.list(dir.resolve("tmp")).count(), "nor left half-written");
    for (String bad : List.of("../escape", "a/b", ".hidden", "", "UPPER")) {
      assertThrows(IllegalArgumentException.class, () -> cache.namedFiles().find(bad), bad);
    }
    assertEquals(0, cache.empty().diskBytes(), "emptying the cache removes content only");
    assertTrue(cache.namedFiles().find("x").isPresent(), "kept files go with their owners, not with the content");
  }

  @Test
  void getOrLoad_concurrentMisses_runOneLoader() throws Exception {
    PageCache cache = open();
    byte[] b = bytes(50_000);
    Digest d = Digest.sha256(b);
    AtomicInteger calls = new AtomicInteger();
    CountDownLatch release = new CountDownLatch(1);
    List<Thread> readers = new java.util.concurrent.CopyOnWriteArrayList<>();
    ExecutorService pool = Executors.newFixedThreadPool(8, Await.recording(readers));
    try {
      List<Future<byte[]>> all = new ArrayList<>();
      for (int i = 0; i < 8; i++) {
        all.add(pool.submit(() -> cache.getOrLoad(d, () -> {
          calls.incrementAndGet();
          try {
            release.await();
          } catch (InterruptedException e) {
            throw new java.io.InterruptedIOException();
          }
          return v(b);
        })));
      }
      // Every reader is in: one loading (held), seven waiting for its load.
      Await.until(Duration.ofSeconds(10), () -> readers.size() == 8, () -> readers.size() + " readers started");
      Await.waiting(Duration.ofSeconds(10), readers);
      release.countDown();
      for (Future<byte[]> f : all) {
        assertArrayEquals(b, f.get(10, TimeUnit.SECONDS));
      }
    } finally {
      pool.shutdownNow();
    }
    assertEquals(1, calls.get());
  }

  @Test
  void getOrLoad_identicalContentOfTwoLayers_isStoredAndLoadedOnce() throws IOException {
    PageCache cache = open();
    byte[] shared = bytes(80_000);
    AtomicInteger fetches = new AtomicInteger();
    // Two layers, two images: the same chunk digest, so one fetch and one record on disk.
    cache.getOrLoad(Digest.sha256(shared), () -> { fetches.incrementAndGet(); return v(shared.clone()); });
    cache.getOrLoad(Digest.sha256(shared), () -> { fetches.incrementAndGet(); return v(shared.clone()); });
    cache.awaitWrites();
    assertEquals(1, fetches.get());
    assertEquals(1, cache.stats().diskEntries());
    assertEquals(PackFile.HEADER + shared.length, cache.stats().diskBytes());
  }

  @Test
  void getOrLoad_loaderReturningWrongBytes_failsAndStoresNothing() throws IOException {
    PageCache cache = open();
    byte[] good = bytes(1000);
    Digest d = Digest.sha256(good);
    // Verified content, but of other bytes: the cache refuses it for this digest.
    assertThrows(DigestMismatchException.class, () -> cache.getOrLoad(d, () -> v(bytes(1000))));
    cache.awaitWrites();
    assertEquals(0, cache.stats().diskEntries());
    assertArrayEquals(good, cache.getOrLoad(d, () -> v(good)));
  }

  /** A step that may throw. */
  private interface Step {
    void run() throws Exception;
  }

  /**
   * Runs {@code read} on a thread of its own and, once that thread waits (for a reservation's producer), {@code
   * meanwhile}; then returns what the read got.
   */
  private static byte[] readWhileItWaits(java.util.concurrent.Callable<byte[]> read, Step meanwhile) throws Exception {
    List<Thread> readers = new java.util.concurrent.CopyOnWriteArrayList<>();
    ExecutorService pool = Executors.newSingleThreadExecutor(Await.recording(readers));
    try {
      Future<byte[]> reader = pool.submit(read);
      Await.until(Duration.ofSeconds(10), () -> readers.size() == 1, () -> "the reader started");
      Await.waiting(Duration.ofSeconds(10), readers);
      assertTrue(!reader.isDone(), "the reader waits for the producer");
      meanwhile.run();
      return reader.get(5, TimeUnit.SECONDS);
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void reservation_filled_servesWaitingReadersWithoutLoading() throws Exception {
    PageCache cache = open();
    byte[] b = bytes(30_000);
    Digest d = Digest.sha256(b);
    Reservation r = cache.reserve(d).orElseThrow();
    assertEquals(Optional.empty(), cache.reserve(d), "one producer per entry");
    AtomicInteger loads = new AtomicInteger();
    assertArrayEquals(b, readWhileItWaits(() -> cache.getOrLoad(d, () -> { loads.incrementAndGet(); return v(b); }),
        () -> r.fill(v(b))));
    assertEquals(0, loads.get());
    assertEquals(1, cache.stats().reservationHits());
    assertEquals(Optional.empty(), cache.reserve(d), "cached content needs no producer");
  }

  @Test
  void reservationForLater_filledWithoutAReader_goesToDiskOnly_andIntoMemoryWhenRead() throws Exception {
    PageCache cache = open();
    byte[] b = bytes(30_000);
    Digest d = Digest.sha256(b);
    Reservation r = cache.reserveForLater(d).orElseThrow();
    assertEquals(Optional.empty(), cache.reserveForLater(d), "one producer per entry");
    r.fill(v(b));
    assertTrue(cache.contains(d), "visible before its disk write is done");
    cache.awaitWrites();
    assertEquals(1, cache.stats().diskEntries());
    assertArrayEquals(b, cache.get(d).orElseThrow());
    assertEquals(0, cache.stats().memoryHits(), "not in the memory tier");
    assertEquals(1, cache.stats().diskHits());
    assertArrayEquals(b, cache.get(d).orElseThrow());
    assertEquals(1, cache.stats().memoryHits(), "read once, in the memory tier");
    assertEquals(1, cache.stats().diskHits());
  }

  @Test
  void reservationForLater_aReaderWaitedForIt_keepsItInMemory() throws Exception {
    PageCache cache = open();
    byte[] b = bytes(30_000);
    Digest d = Digest.sha256(b);
    Reservation r = cache.reserveForLater(d).orElseThrow();
    assertArrayEquals(b, readWhileItWaits(() -> cache.getOrLoad(d, () -> v(b)), () -> r.fill(v(b))));
    cache.awaitWrites();
    long before = cache.stats().memoryHits();
    assertArrayEquals(b, cache.get(d).orElseThrow());
    assertEquals(before + 1, cache.stats().memoryHits());
    assertEquals(0, cache.stats().diskHits());
  }

  @Test
  void reservation_abandonedOrFilledWrong_readersLoadThemselves() throws Exception {
    PageCache cache = open();
    byte[] b = bytes(30_000);
    Digest d = Digest.sha256(b);
    Reservation r = cache.reserve(d).orElseThrow();
    assertArrayEquals(b, readWhileItWaits(() -> cache.getOrLoad(d, () -> v(b)),
        () -> assertThrows(DigestMismatchException.class, () -> r.fill(v(bytes(30_000))))));
    byte[] c = bytes(100);
    Reservation r2 = cache.reserve(Digest.sha256(c)).orElseThrow();
    r2.abandon();
    assertArrayEquals(c, cache.getOrLoad(Digest.sha256(c), () -> v(c)));
  }

  @Test
  void reservation_slowProducer_readersStopWaitingAfterTheConfiguredWait() throws Exception {
    PageCache cache = open(1 << 20, 1L << 30, Duration.ofMillis(200));
    byte[] b = bytes(100);
    Digest d = Digest.sha256(b);
    cache.reserve(d).orElseThrow();
    long start = System.nanoTime();
    assertArrayEquals(b, cache.getOrLoad(d, () -> v(b)));
    long waited = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
    assertTrue(waited >= 150 && waited < 5000, "waited " + waited + " ms");
  }

  @Test
  void reservationWithProgress_stuckProducer_readerFallsBackAfterOneStall_notTheWholeWait() throws Exception {
    // A reservation wait of an hour: only the producer's stall (50 ms) can let this reader go on.
    PageCache cache = open(1 << 20, 1L << 30, Duration.ofHours(1));
    byte[] b = bytes(100);
    Digest d = Digest.sha256(b);
    Reservation r = cache.reserve(d, new ProducerProgress(Duration.ofMillis(50))).orElseThrow();
    AtomicInteger loads = new AtomicInteger();
    assertArrayEquals(b, cache.getOrLoad(d, () -> { loads.incrementAndGet(); return v(b); }));
    assertEquals(1, loads.get(), "the reader fetched it itself");
    r.abandon();
  }

  @Test
  void reservationWithProgress_movingProducer_isWaitedForPastManyStalls() throws Exception {
    PageCache cache = open(1 << 20, 1L << 30, Duration.ofHours(1));
    byte[] b = bytes(100);
    Digest d = Digest.sha256(b);
    ProducerProgress progress = new ProducerProgress(Duration.ofMillis(100));
    Reservation r = cache.reserve(d, progress).orElseThrow();
    AtomicInteger loads = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      Future<byte[]> reader = pool.submit(() -> cache.getOrLoad(d, () -> { loads.incrementAndGet(); return v(b); }));
      CountDownLatch advancing = new CountDownLatch(1);
      Future<?> producer = pool.submit(() -> {
        // Moves for about ten stalls, then delivers.
        for (int i = 0; i < 50; i++) {
          progress.advanced();
          advancing.countDown();
          Thread.sleep(20);
        }
        r.fill(v(b));
        return null;
      });
      advancing.await();
      assertArrayEquals(b, reader.get(30, TimeUnit.SECONDS));
      producer.get(30, TimeUnit.SECONDS);
    } finally {
      pool.shutdownNow();
    }
    assertEquals(0, loads.get(), "a moving producer is waited for");
    assertEquals(1, cache.stats().reservationHits());
  }

  @Test
  void contains_seesMemoryAndDisk_withoutCountingALookup() throws IOException {
    PageCache cache = open();
    byte[] b = bytes(1000);
    Digest d = Digest.sha256(b);
    assertTrue(!cache.contains(d));
    cache.put(d, b);
    assertTrue(cache.contains(d));
    cache.close();
    PageCache reopened = open(0, 1L << 30, Duration.ofSeconds(1));
    assertTrue(reopened.contains(d), "on disk after a restart");
    assertEquals(0, reopened.stats().misses() + reopened.stats().memoryHits() + reopened.stats().diskHits());
  }

  @Test
  void killDashNine_duringHeavyWrites_leavesACacheThatServesNothingCorrupt() throws Exception {
    Path java = Path.of(System.getProperty("java.home"), "bin", "java");
    Process writer = new ProcessBuilder(java.toString(), "-cp", System.getProperty("java.class.path"),
        CacheWriterProcess.class.getName(), dir.toString(), "7").redirectErrorStream(true).start();
    try (BufferedReader out = new BufferedReader(new InputStreamReader(writer.getInputStream()))) {
      assertEquals("ready", out.readLine());
      // Entries are 64-576 KiB: 40 of them written, at least, once this much is on disk.
      Await.until(Duration.ofSeconds(20), () -> packBytes() >= 40L * 576 * 1024, () -> "40 entries before the kill");
      writer.destroyForcibly();
      assertTrue(writer.waitFor(10, TimeUnit.SECONDS));
      assertEquals(137, writer.exitValue(), "killed by SIGKILL");
    }
    PageCache cache = open();
    cache.awaitRestored();
    long entries = cache.stats().diskEntries();
    assertTrue(entries >= 40, "entries written before the kill: " + entries);
    assertEquals(0, Files.list(dir.resolve("tmp")).count(), "unfinished writes are removed");
    // The writer's entries, in its order (the same seed): each is served exactly, or not at all.
    int served = 0;
    for (byte[] b : CacheWriterProcess.entries(7, (int) entries + 20)) {
      Optional<byte[]> got = cache.get(Digest.sha256(b));
      if (got.isPresent()) {
        assertArrayEquals(b, got.get());
        served++;
      }
    }
    assertEquals(entries - cache.stats().corruptDiscarded(), served);
    byte[] fresh = bytes(1000);
    cache.put(Digest.sha256(fresh), fresh);
    assertArrayEquals(fresh, open().get(Digest.sha256(fresh)).orElseThrow(), "the cache is usable after the crash");
  }

  private long packBytes() throws IOException {
    Path packs = dir.resolve("packs");
    if (!Files.isDirectory(packs)) {
      return 0;
    }
    long total = 0;
    try (var s = Files.list(packs)) {
      for (Path p : s.toList()) {
        try {
          total += Files.size(p);
        } catch (java.nio.file.NoSuchFileException gone) {
          // evicted
        }
      }
    }
    return total;
  }
}
