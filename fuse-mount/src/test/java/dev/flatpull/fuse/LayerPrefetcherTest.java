package dev.flatpull.fuse;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.core.Await;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.BuiltLayer;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.pagecache.PageCache;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LayerPrefetcherTest {
  @TempDir Path dir;
  private final Map<String, byte[]> files = new LinkedHashMap<>();
  /** Ranges the layer's blob was read in. */
  private AtomicInteger requests;
  private LazyLayer layer;
  private PageCache cache;

  @BeforeEach
  void layer() throws Exception {
    Random r = new Random(3);
    LayerTar tar = new LayerTar();
    for (int i = 0; i < 12; i++) {
      byte[] b = new byte[150_000 + i * 1000];
      r.nextBytes(b);
      String name = "lib/part" + i + ".so";
      files.put(name, b);
      tar.file(name, b);
    }
    BuiltLayer built = BuiltLayer.write(tar.bytes(), LayerFormat.ESTARGZ, 64 * 1024,
        List.of("lib/part7.so", "lib/part2.so"), dir);
    layerBlob = built.blob;
    requests = built.requests;
    layer = built.lazy(64 * 1024);
    cache = PageCache.open(dir.resolve("cache"), new CacheSettings(Optional.empty(), 64L << 20, 1L << 30, Duration.ofSeconds(5)));
    requests.set(0);
  }

  @AfterEach
  void close() throws Exception {
    cache.close();
  }

  private boolean cached(String name) throws Exception {
    for (LayerChunk c : layer.index().entry(name).orElseThrow().chunks()) {
      if (cache.get(c.digest()).isEmpty()) {
        return false;
      }
    }
    return true;
  }

  /** Every stored chunk of the layer, by offset in the blob. */
  private List<LayerChunk> chunksInBlobOrder() {
    List<LayerChunk> all = new java.util.ArrayList<>();
    layer.index().entries().forEach(e -> all.addAll(e.chunks()));
    all.sort(java.util.Comparator.comparingLong(c -> c.stored().offset()));
    return all;
  }

  /**
   * A miss whose content a producer (a runtime-image stream) has reserved waits for it and fetches nothing: its
   * neighbours are not fetched alone, in a request of their own that would race the stream.
   */
  @Test
  void reader_aMissAProducerServes_fetchesNoNeighbours() throws Exception {
    // The reader's activity clock ticks when it found its content missing: then the producer fills the reservation.
    java.util.concurrent.CountDownLatch waiting = new java.util.concurrent.CountDownLatch(1);
    ReadActivity activity = new ReadActivity(Duration.ZERO, () -> {
      waiting.countDown();
      return System.nanoTime();
    }, () -> {});
    LayerContentReader reader = new LayerContentReader(layer, cache, 0, activity, ContentEvents.NONE,
        PendingProducers.NONE, PageSource.NONE, 200_000);
    LayerEntry part3 = layer.index().entry("lib/part3.so").orElseThrow();
    LayerChunk first = part3.chunks().get(0);
    dev.flatpull.pagecache.Reservation stream = cache.reserve(first.digest()).orElseThrow();
    byte[] truth = Arrays.copyOfRange(files.get("lib/part3.so"), 0, (int) first.size());
    assertTrue(truth.length >= 4096, "the read lies in the reserved chunk");
    Thread producer = new Thread(() -> {
      try {
        waiting.await();
        stream.fill(dev.flatpull.core.VerifiedContent.check(first.digest(), "stream", truth));
      } catch (Exception e) {
        stream.abandon();
      }
    });
    producer.start();
    byte[] got = new byte[4096];
    Thread reading = new Thread(() -> {
      try {
        reader.read(part3, 0, got, got.length);
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    });
    reading.start();
    reading.join(10_000);
    producer.join(10_000);
    assertArrayEquals(Arrays.copyOf(truth, 4096), got);
    assertEquals(0, requests.get(), "no request of the reader's own, neither for the miss nor for its neighbours");
  }

  /**
   * A miss brings the chunks stored after it (the files that follow it in the layer) in the same request; the window
   * doubles while misses move forward through the blob, and starts again small after a miss elsewhere.
   */
  @Test
  void reader_aMiss_fetchesItsNeighbourhoodInTheSameRequest_andTheWindowGrowsWithForwardMisses() throws Exception {
    long window = 200_000;
    LayerContentReader reader = new LayerContentReader(layer, cache, 0, new ReadActivity(), ContentEvents.NONE,
        PendingProducers.NONE, PageSource.NONE, window);
    List<LayerChunk> order = chunksInBlobOrder();
    LayerEntry part3 = layer.index().entry("lib/part3.so").orElseThrow();
    byte[] got = new byte[4096];

    reader.read(part3, 0, got, got.length);

    assertArrayEquals(Arrays.copyOf(files.get("lib/part3.so"), 4096), got);
    assertEquals(1, requests.get(), "the miss and its neighbourhood in one request");
    long end = part3.chunks().get(0).stored().end();
    List<LayerChunk> inWindow = order.stream().filter(c -> c.stored().offset() >= end
        && c.stored().end() <= end + window).toList();
    assertTrue(inWindow.size() >= 2, "the test layer puts several chunks in the window");
    for (LayerChunk c : inWindow) {
      assertTrue(cache.contains(c.digest()), "neighbour at " + c.stored().offset() + " fetched");
    }
    LayerChunk next = order.get(order.indexOf(inWindow.get(inWindow.size() - 1)) + 1);
    assertFalse(cache.contains(next.digest()), "nothing past the window");

    // A forward miss just past it: the window doubles.
    LayerEntry owner = layer.index().entries().stream().filter(e -> e.chunks().contains(next)).findFirst()
        .orElseThrow();
    reader.read(owner, next.fileOffset(), got, got.length);
    assertEquals(2, requests.get());
    for (LayerChunk c : order) {
      if (c.stored().offset() >= next.stored().end() && c.stored().end() <= next.stored().end() + 2 * window) {
        assertTrue(cache.contains(c.digest()), "doubled window: chunk at " + c.stored().offset());
      }
    }

    // A miss back at the start of the blob: the window is small again.
    LayerChunk first = order.get(0);
    LayerEntry firstOwner = layer.index().entries().stream().filter(e -> e.chunks().contains(first)).findFirst()
        .orElseThrow();
    reader.read(firstOwner, first.fileOffset(), got, got.length);
    for (LayerChunk c : order) {
      if (c.stored().offset() >= first.stored().end() + window + 70_000 && c.stored().end() < end) {
        assertFalse(cache.contains(c.digest()), "reset window: chunk at " + c.stored().offset() + " not fetched");
      }
    }
  }

  @Test
  void reader_missingChunkWhosePagesAreKnown_isServedFromThePages_withoutARequest() throws Exception {
    LayerEntry file = layer.index().entry("lib/part5.so").orElseThrow();
    byte[] truth = files.get("lib/part5.so");
    // Pages 3..5 of the file, as a page-mode runtime image brings them: verified pages under their own digests.
    Map<Long, dev.flatpull.core.Digest> known = new java.util.HashMap<>();
    for (long p = 3; p <= 5; p++) {
      byte[] page = Arrays.copyOfRange(truth, (int) p * 4096, (int) (p + 1) * 4096);
      dev.flatpull.core.Digest d = dev.flatpull.core.Digest.sha256(page);
      cache.put(d, page);
      known.put(p, d);
    }
    List<ContentEvents.Origin> origins = new java.util.ArrayList<>();
    LayerContentReader reader = new LayerContentReader(layer, cache, 0, new ReadActivity(),
        (digest, bytes, origin) -> origins.add(origin), PendingProducers.NONE,
        (name, page) -> name.equals(file.name()) ? Optional.ofNullable(known.get(page)) : Optional.empty());
    byte[] dst = new byte[3 * 4096 - 100];
    assertEquals(dst.length, reader.read(file, 3 * 4096 + 50, dst, dst.length));
    assertArrayEquals(Arrays.copyOfRange(truth, 3 * 4096 + 50, 3 * 4096 + 50 + dst.length), dst);
    assertEquals(0, requests.get(), "served from the pages alone");
    assertEquals(List.of(ContentEvents.Origin.PRESENT, ContentEvents.Origin.PRESENT, ContentEvents.Origin.PRESENT),
        origins);
    // A read reaching a page the source lacks takes the chunk from the lazy loader instead.
    byte[] more = new byte[4 * 4096];
    assertEquals(more.length, reader.read(file, 3 * 4096, more, more.length));
    assertArrayEquals(Arrays.copyOfRange(truth, 3 * 4096, 7 * 4096), more);
    assertTrue(requests.get() > 0);
  }

  @Test
  void reader_missAsksPendingProducersFirst_andReportsWhereEachChunkCameFrom() throws Exception {
    List<ContentEvents.Origin> origins = new java.util.ArrayList<>();
    AtomicInteger asked = new AtomicInteger();
    // A producer announces, while the read waits, a reservation of the file's first chunk, then fills it.
    LayerEntry file = layer.index().entry("lib/part3.so").orElseThrow();
    LayerChunk first = file.chunks().get(0);
    LayerContentReader reader = new LayerContentReader(layer, cache, 0, new ReadActivity(),
        (digest, bytes, origin) -> origins.add(origin), () -> {
          if (asked.incrementAndGet() == 1) {
            try {
              cache.reserve(first.digest()).orElseThrow().fill(layer.fetchChunks(List.of(first)).get(first));
            } catch (java.io.IOException e) {
              throw new AssertionError(e);
            }
          }
        }, PageSource.NONE);
    byte[] dst = new byte[(int) (first.size() + 10)];
    int n = reader.read(file, 0, dst, dst.length);
    assertEquals(dst.length, n);
    assertArrayEquals(Arrays.copyOf(files.get("lib/part3.so"), n), dst);
    assertEquals(1, asked.get(), "asked once, before fetching the miss");
    assertEquals(List.of(ContentEvents.Origin.WAITED, ContentEvents.Origin.FETCHED), origins);
    origins.clear();
    reader.read(file, 0, dst, dst.length);
    assertEquals(List.of(ContentEvents.Origin.PRESENT, ContentEvents.Origin.PRESENT), origins);
    assertEquals(1, asked.get(), "a read that misses nothing asks no one");
  }

  @Test
  void run_landmarkFilesOnly_fetchesThemInOneRequestAndNothingElse() throws Exception {
    LayerPrefetcher p = new LayerPrefetcher(layer, cache, new ReadActivity(), layer.index().prioritized(), false);
    p.run();
    assertEquals(List.of("lib/part7.so", "lib/part2.so"), layer.index().prioritized());
    assertTrue(cached("lib/part7.so") && cached("lib/part2.so"));
    assertEquals(false, cached("lib/part3.so"));
    assertEquals(1, requests.get(), "the prioritized files are adjacent: one coalesced request");
    int chunks = layer.index().entry("lib/part7.so").orElseThrow().chunks().size()
        + layer.index().entry("lib/part2.so").orElseThrow().chunks().size();
    assertEquals(chunks, p.prefetchedChunks());
  }

  @Test
  void run_withBackground_fetchesTheWholeLayerAndReadsThenNeedNoRequest() throws Exception {
    new LayerPrefetcher(layer, cache, new ReadActivity(), layer.index().prioritized(), true).run();
    for (String f : files.keySet()) {
      assertTrue(cached(f), f);
    }
    int before = requests.get();
    assertTrue(before < 12, "batched into few requests: " + before);
    LayerContentReader reader = new LayerContentReader(layer, cache);
    for (Map.Entry<String, byte[]> f : files.entrySet()) {
      byte[] got = new byte[f.getValue().length];
      reader.read(layer.index().entry(f.getKey()).orElseThrow(), 0, got, got.length);
      assertArrayEquals(f.getValue(), got);
    }
    assertEquals(before, requests.get());
  }

  /** The background's content is for later: on disk, not in the memory tier; the prioritized files are in memory. */
  @Test
  void run_withBackground_keepsTheBackgroundsContentOutOfMemory_andThePrioritizedFilesIn() throws Exception {
    new LayerPrefetcher(layer, cache, new ReadActivity(), layer.index().prioritized(), true).run();
    cache.awaitWrites();
    Digest prioritized = layer.index().entry("lib/part7.so").orElseThrow().chunks().get(0).digest();
    Digest background = layer.index().entry("lib/part3.so").orElseThrow().chunks().get(0).digest();
    var before = cache.stats();
    assertTrue(cache.get(prioritized).isPresent());
    assertTrue(cache.get(background).isPresent());
    var after = cache.stats();
    assertEquals(1, after.memoryHits() - before.memoryHits(), "the prioritized file's chunk, from memory");
    assertEquals(1, after.diskHits() - before.diskHits(), "the background's chunk, from disk");
  }

  @Test
  void whenWhole_runsOnceTheBackgroundFetchHasEverything_andNotWithoutBackgroundOrAfterAStop() throws Exception {
    List<Boolean> allCachedWhenRun = new ArrayList<>();
    Runnable then = () -> allCachedWhenRun.add(files.keySet().stream().allMatch(f -> {
      try {
        return cached(f);
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    }));
    new LayerPrefetcher(layer, cache, new ReadActivity(), layer.index().prioritized(), false).whenWhole(then).run();
    assertEquals(List.of(), allCachedWhenRun, "prioritized files only: the layer is not whole");
    LayerPrefetcher stopped = new LayerPrefetcher(layer, cache, new ReadActivity(), List.of(), true).whenWhole(then);
    stopped.stop();
    stopped.run();
    assertEquals(List.of(), allCachedWhenRun, "a stopped fetch is not whole");
    new LayerPrefetcher(layer, cache, new ReadActivity(), List.of(), true).whenWhole(then).run();
    assertEquals(List.of(true), allCachedWhenRun);
  }

  @Test
  void background_waitsWhileAnOnDemandReadIsWaiting() throws Exception {
    ReadActivity activity = new ReadActivity();
    activity.begin();
    LayerPrefetcher p = new LayerPrefetcher(layer, cache, activity, List.of(), true);
    Thread t = new Thread(p);
    t.start();
    awaitBlocked(t);
    assertEquals(0, requests.get(), "background fetching steps aside while a read waits");
    activity.end();
    t.join(10_000);
    assertTrue(cached("lib/part0.so") && cached("lib/part11.so"));
  }

  /**
   * With a quiet period, background fetching waits until on-demand reads have left the registry alone that long, not
   * just until none waits: a start's misses come every few milliseconds. The clock is the test's; the background
   * thread is only ever seen blocked (never timed), then done after the clock passes the quiet period.
   */
  @Test
  void background_withAQuietPeriod_startsOnlyOnceReadsHaveBeenQuietThatLong() throws Exception {
    java.util.concurrent.atomic.AtomicLong now = new java.util.concurrent.atomic.AtomicLong();
    ReadActivity activity = new ReadActivity(Duration.ofSeconds(2), now::get, () -> {});
    activity.touch(); // a layer was mounted at t = 0
    LayerPrefetcher p = new LayerPrefetcher(layer, cache, activity, List.of(), true);
    Thread t = new Thread(p);
    t.start();
    awaitBlocked(t);
    now.set(1_500_000_000L);
    activity.begin(); // a miss at 1.5 s
    now.set(1_600_000_000L);
    activity.end();
    now.set(3_000_000_000L); // 2 s after the mount, 1.4 s after the miss
    activity.recheck();
    awaitBlocked(t);
    assertEquals(0, requests.get(), "nothing fetched while reads are not quiet for 2 s");
    now.set(3_600_000_000L);
    activity.recheck();
    t.join(10_000);
    assertFalse(t.isAlive(), "fetched once quiet");
    assertTrue(cached("lib/part0.so") && cached("lib/part11.so"));
  }

  /** Until {@code t} waits on a monitor (it re-checks the clock every millisecond of its own at most). */
  private static void awaitBlocked(Thread t) throws Exception {
    Await.waiting(Duration.ofSeconds(5), List.of(t));
  }

  /**
   * The 30-second stall: background fetching yields while a read waits, and must not hold reservations meanwhile, or
   * a read of a chunk in its batch waits on that reservation (and counts as a waiting read), so neither moves until
   * the reservation wait runs out. Deterministic: latches order the steps; the bound on the last read is far below
   * the reservation wait (60 s here), so on the stalling code it fails.
   */
  @Test
  void background_holdsNoReservationWhileItYields_soAReadOfItsBatchIsNotStalled() throws Exception {
    PageCache slowCache = PageCache.open(dir.resolve("cache2"),
        new CacheSettings(Optional.empty(), 64L << 20, 1L << 30, Duration.ofSeconds(60)));
    java.util.concurrent.CountDownLatch firstFetching = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch releaseFirst = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch yielded = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.atomic.AtomicBoolean first = new java.util.concurrent.atomic.AtomicBoolean(true);
    BlobReader plain = range -> layerBlobRange(range);
    BlobReader gated = range -> {
      if (first.getAndSet(false)) {
        firstFetching.countDown();
        try {
          releaseFirst.await();
        } catch (InterruptedException e) {
          throw new java.io.InterruptedIOException();
        }
      }
      return plain.read(range);
    };
    LazyLayer gatedLayer = new LazyLayer(layer.index(), gated, 64 * 1024);
    ReadActivity activity = new ReadActivity(yielded::countDown);
    LayerContentReader reader = new LayerContentReader(gatedLayer, slowCache, LayerContentReader.DEFAULT_READAHEAD,
        activity);
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(3);
    try {
      var r0 = pool.submit(() -> readWhole(reader, "lib/part0.so"));
      firstFetching.await();
      LayerPrefetcher p = new LayerPrefetcher(gatedLayer, slowCache, activity, List.of(), true);
      var prefetch = pool.submit(p);
      yielded.await();
      var r1 = pool.submit(() -> readWhole(reader, "lib/part5.so"));
      assertArrayEquals(files.get("lib/part5.so"), r1.get(10, java.util.concurrent.TimeUnit.SECONDS),
          "a read of a chunk of the yielding batch is served at once, not after the reservation wait");
      releaseFirst.countDown();
      assertArrayEquals(files.get("lib/part0.so"), r0.get(10, java.util.concurrent.TimeUnit.SECONDS));
      prefetch.get(10, java.util.concurrent.TimeUnit.SECONDS);
      for (LayerChunk c : layer.index().entry("lib/part11.so").orElseThrow().chunks()) {
        assertTrue(slowCache.get(c.digest()).isPresent(), "the background fetch went on afterwards");
      }
    } finally {
      releaseFirst.countDown();
      pool.shutdownNow();
      slowCache.close();
    }
  }

  /**
   * A blob whose range reads stream: the bytes up to {@code gateAt} (an offset in the blob) arrive at once, the rest
   * only once {@code gate} opens; {@code failAtGate} makes the stream break there instead (a reset).
   */
  private BlobReader streamingGated(long gateAt, java.util.concurrent.CountDownLatch gate, boolean failAtGate) {
    return new BlobReader() {
      @Override
      public byte[] read(dev.flatpull.core.ByteRange range) {
        requests.incrementAndGet();
        return layerBlobRange(range);
      }

      @Override
      public <T> T stream(dev.flatpull.core.ByteRange range, dev.flatpull.fetcher.registry.RegistryClient.RangeReader<T> reader)
          throws java.io.IOException {
        requests.incrementAndGet();
        byte[] bytes = layerBlobRange(range);
        int open = (int) Math.max(0, Math.min(bytes.length, gateAt - range.offset()));
        return reader.read(new java.io.InputStream() {
          private int at;

          @Override
          public int read() {
            throw new UnsupportedOperationException();
          }

          @Override
          public int read(byte[] b, int off, int len) throws java.io.IOException {
            if (at >= bytes.length) {
              return -1;
            }
            if (at >= open) {
              if (failAtGate) {
                throw new java.net.SocketException("connection reset");
              }
              try {
                gate.await();
              } catch (InterruptedException e) {
                throw new java.io.InterruptedIOException();
              }
            }
            int n = Math.min(len, (at < open ? open : bytes.length) - at);
            System.arraycopy(bytes, at, b, off, n);
            at += n;
            return n;
          }
        });
      }
    };
  }

  /**
   * A read waits for its own chunks, not for the readahead in the same request: on a link of 200 Mbit/s a 4 MiB
   * neighbourhood takes 170 ms to arrive after the missed chunk at its start. The readahead fills the cache as it comes;
   * a read of it meanwhile waits for it (one request in all). Fails on code that returned after the whole request.
   */
  @Test
  void reader_returnsOnceItsOwnChunksArrived_whileItsReadaheadStillStreams() throws Exception {
    LayerChunk firstChunk = layer.index().entry("lib/part0.so").orElseThrow().chunks().get(0);
    java.util.concurrent.CountDownLatch gate = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.ExecutorService transfers = java.util.concurrent.Executors.newCachedThreadPool();
    List<Thread> poolThreads = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(2,
        Await.recording(poolThreads));
    LazyLayer streamed = new LazyLayer(layer.index(), streamingGated(firstChunk.stored().end(), gate, false), 64 * 1024,
        Runnable::run, transfers);
    LayerContentReader reader = new LayerContentReader(streamed, cache, LayerContentReader.DEFAULT_READAHEAD,
        new ReadActivity());
    LayerEntry part0 = layer.index().entry("lib/part0.so").orElseThrow();
    try {
      byte[] head = new byte[4096];
      assertEquals(4096, pool.submit(() -> reader.read(part0, 0, head, head.length))
          .get(10, java.util.concurrent.TimeUnit.SECONDS), "served while the rest of its request has not arrived");
      assertArrayEquals(Arrays.copyOf(files.get("lib/part0.so"), 4096), head);
      LayerChunk later = part0.chunks().get(2);
      var tail = pool.submit(() -> {
        byte[] b = new byte[1000];
        reader.read(part0, later.fileOffset(), b, b.length);
        return b;
      });
      Await.until(Duration.ofSeconds(5), () -> poolThreads.size() == 2, () -> poolThreads + " started");
      Await.waiting(Duration.ofSeconds(5), poolThreads);
      assertFalse(tail.isDone(), "a read of the readahead waits for it to arrive");
      gate.countDown();
      assertArrayEquals(Arrays.copyOfRange(files.get("lib/part0.so"), (int) later.fileOffset(),
          (int) later.fileOffset() + 1000), tail.get(10, java.util.concurrent.TimeUnit.SECONDS));
      assertEquals(1, requests.get(), "the readahead was not fetched again");
      assertArrayEquals(files.get("lib/part0.so"), readWhole(reader, "lib/part0.so"));
    } finally {
      gate.countDown();
      pool.shutdownNow();
      transfers.shutdownNow();
    }
  }

  /**
   * A request that breaks after the chunks a read needs: the read is served, the readahead's reservations are given
   * up, and a later read of it fetches it again instead of waiting on a fetch that will never end.
   */
  @Test
  void reader_readaheadWhoseRequestBreaks_isFetchedAgainByTheReadThatNeedsIt() throws Exception {
    LayerChunk firstChunk = layer.index().entry("lib/part0.so").orElseThrow().chunks().get(0);
    java.util.concurrent.ExecutorService transfers = java.util.concurrent.Executors.newCachedThreadPool();
    LazyLayer streamed = new LazyLayer(layer.index(), streamingGated(firstChunk.stored().end(),
        new java.util.concurrent.CountDownLatch(0), true), 64 * 1024, Runnable::run, transfers);
    LayerContentReader reader = new LayerContentReader(streamed, cache, LayerContentReader.DEFAULT_READAHEAD,
        new ReadActivity());
    LayerEntry part0 = layer.index().entry("lib/part0.so").orElseThrow();
    try {
      byte[] head = new byte[4096];
      assertEquals(4096, reader.read(part0, 0, head, head.length));
      assertArrayEquals(Arrays.copyOf(files.get("lib/part0.so"), 4096), head);
      LayerChunk later = part0.chunks().get(1);
      byte[] b = new byte[1000];
      java.io.IOException broken = org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class,
          () -> reader.read(part0, later.fileOffset(), b, b.length), "every request of this blob breaks after its first chunk");
      assertTrue(broken.getMessage().contains("connection reset") || String.valueOf(broken.getCause()).contains("reset"),
          broken.toString());
      assertEquals(2, requests.get(), "the second read asked again rather than waiting on the broken readahead");
    } finally {
      transfers.shutdownNow();
    }
  }

  private byte[] layerBlob;

  private byte[] layerBlobRange(dev.flatpull.core.ByteRange range) {
    return Arrays.copyOfRange(layerBlob, (int) range.offset(), (int) range.end());
  }

  private byte[] readWhole(LayerContentReader reader, String name) throws java.io.IOException {
    LayerEntry e = layer.index().entry(name).orElseThrow();
    byte[] got = new byte[(int) e.size()];
    byte[] buf = new byte[128 * 1024];
    int off = 0;
    while (off < got.length) {
      int n = reader.read(e, off, buf, buf.length);
      System.arraycopy(buf, 0, got, off, n);
      off += n;
    }
    return got;
  }

  @Test
  void readerDuringPrefetch_getsCorrectBytes() throws Exception {
    LayerPrefetcher p = new LayerPrefetcher(layer, cache, new ReadActivity(), layer.index().prioritized(), true);
    Thread t = new Thread(p);
    t.start();
    LayerContentReader reader = new LayerContentReader(layer, cache);
    for (Map.Entry<String, byte[]> f : files.entrySet()) {
      LayerEntry e = layer.index().entry(f.getKey()).orElseThrow();
      byte[] got = new byte[f.getValue().length];
      reader.read(e, 0, got, got.length);
      assertArrayEquals(f.getValue(), got, f.getKey());
    }
    t.join(10_000);
  }
}
