package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.core.ByteRange;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.RequestKind;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * The FUSE read path against a real registry whose answers the test can slow down, break or corrupt: one slow file
 * does not stall the others, failures and wrong bytes become EIO (never wrong data) and a later read succeeds once the
 * registry recovers, and content shared by two images is fetched and stored once.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class FuseReadPathIT {
  private static final String SHARED = "usr/lib/jvm/lib/libjava.so";

  /** What the registry does to range reads. */
  enum Mode { NORMAL, FAIL, CORRUPT }

  private volatile Mode mode = Mode.NORMAL;
  private volatile ByteRange slowRange;
  /** Counted down when a read reaches the slow range (the slow read is then held at the registry). */
  private final java.util.concurrent.CountDownLatch slowReached = new java.util.concurrent.CountDownLatch(1);
  private final Cleanup cleanup = new Cleanup();
  private RegistryServer registry;
  private TestImage image;
  private RegistryClients clients;
  private final FetchStatistics stats = new FetchStatistics();
  private final AtomicInteger eio = new AtomicInteger();
  private final List<LayerMount> mounts = new ArrayList<>();
  private PageCache cache;
  private Path work;
  private Path mountA;
  private Path mountB;
  private LazyLayer layerA;

  @BeforeAll
  void setUp() throws Exception {
    Processes.requireFuse();
    registry = cleanup.add(RegistryServer.shared());
    image = TestImage.push(registry.address(), "it/read-a", "plain", "a");
    TestImage.push(registry.address(), "it/read-b", "plain", "b");
    for (String repo : List.of("it/read-a", "it/read-b")) {
      Cli.Run c = Cli.inProcess("convert", "--plain-http", "--chunk-size", "262144",
          registry.address() + "/" + repo + ":plain", registry.address() + "/" + repo + ":esgz");
      assertEquals(0, c.exitCode(), c.stderr());
    }
    work = cleanup.deleteLater(Files.createTempDirectory("flatpull-readpath"));
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true)
        .withBackoff(Duration.ofMillis(1), Duration.ofMillis(5)));
    clients = cleanup.add(new RegistryClients(config, RegistryCredentials.NONE, stats, Sleeper.SYSTEM, InstantSource.system()));
    cache = cleanup.add(PageCache.open(work.resolve("cache"), new CacheSettings(Optional.empty(), 0, 1L << 30, Duration.ofSeconds(10))));
    layerA = open("it/read-a");
    mountA = mount(layerA, "a");
    mountB = mount(open("it/read-b"), "b");
  }

  private LazyLayer open(String repo) throws IOException {
    ImageReference ref = ImageReference.parse(registry.address() + "/" + repo + ":esgz");
    RegistryClient client = clients.client(ref);
    Descriptor lower = client.resolve(ref, Platform.current()).manifest().layers().get(0);
    BlobReader controlled = range -> {
      ByteRange slow = slowRange;
      if (slow != null && range.offset() < slow.end() && slow.offset() < range.end()) {
        slowReached.countDown();
        try {
          Thread.sleep(4000);
        } catch (InterruptedException e) {
          throw new java.io.InterruptedIOException();
        }
      }
      if (mode == Mode.FAIL) {
        throw new IOException("registry unreachable (test)");
      }
      byte[] b = client.readRange(lower.digest(), range);
      if (mode == Mode.CORRUPT) {
        b[b.length / 2] ^= 0x40;
      }
      return b;
    };
    return new LazyLayer(EstargzToc.read(lower, controlled, FetchLimits.DEFAULTS), controlled, 64 * 1024);
  }

  private Path mount(LazyLayer layer, String name) throws IOException {
    FuseEvents events = new FuseEvents() {
      @Override
      public void operationFailed(String operation, String path, int errno, Throwable cause) {
        eio.incrementAndGet();
      }
    };
    LayerMount m = LayerMount.mount(
        new LayerFileSystem(LayerTree.of(layer.index()), new LayerContentReader(layer, cache), events), work.resolve(name));
    mounts.add(cleanup.add(m));
    return m.mountPoint();
  }

  @AfterAll
  void tearDown() throws Exception {
    cleanup.close();
  }


  private static byte[] readSome(Path p, int n) throws IOException {
    try (InputStream in = Files.newInputStream(p)) {
      return in.readNBytes(n);
    }
  }

  @Test
  void slowFetchOfOneFile_doesNotStallReadsOfOtherFiles() throws Exception {
    String slowFile = "usr/lib/jvm/lib/server/libjvm.so";
    LayerChunk first = layerA.index().entry(slowFile).orElseThrow().chunks().get(0);
    slowRange = first.stored();
    ExecutorService pool = Executors.newFixedThreadPool(6);
    try {
      Future<byte[]> slow = pool.submit(() -> readSome(mountA.resolve(slowFile), 4096));
      assertTrue(slowReached.await(10, TimeUnit.SECONDS), "the slow read reached the registry");
      List<String> others = image.files.keySet().stream()
          .filter(f -> f.startsWith("etc/java/") && !f.equals(slowFile)).limit(20).toList();
      long start = System.nanoTime();
      List<Future<byte[]>> reads = new ArrayList<>();
      for (String f : others) {
        reads.add(pool.submit(() -> Files.readAllBytes(mountA.resolve(f))));
      }
      for (int i = 0; i < others.size(); i++) {
        assertArrayEquals(image.files.get(others.get(i)), reads.get(i).get(10, TimeUnit.SECONDS), others.get(i));
      }
      long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
      assertFalse(slow.isDone(), "the slow read is still waiting for the registry");
      assertTrue(tookMs < 3000, "other files were served while one fetch was slow: " + tookMs + " ms");
      byte[] head = slow.get(20, TimeUnit.SECONDS);
      assertArrayEquals(java.util.Arrays.copyOf(image.files.get(slowFile), 4096), head);
    } finally {
      slowRange = null;
      pool.shutdownNow();
    }
  }

  @Test
  void unreachableRegistry_givesEioThenRecovers() throws Exception {
    // A file no other test reads: a cached copy would hide the failure.
    String file = "usr/lib/jvm/lib/libzip.so";
    Path p = mountA.resolve(file);
    int before = eio.get();
    mode = Mode.FAIL;
    try {
      IOException e = assertThrows(IOException.class, () -> Files.readAllBytes(p));
      assertTrue(String.valueOf(e.getMessage()).contains("Input/output error"), e.toString());
    } finally {
      mode = Mode.NORMAL;
    }
    assertTrue(eio.get() > before, "the failure is reported to FuseEvents");
    assertArrayEquals(image.files.get(file), Files.readAllBytes(p));
  }

  @Test
  void corruptedRegistryBytes_giveEioNeverWrongBytes() throws Exception {
    String file = "usr/lib/jvm/lib/libnio.so";
    Path p = mountA.resolve(file);
    mode = Mode.CORRUPT;
    try {
      IOException e = assertThrows(IOException.class, () -> Files.readAllBytes(p));
      assertTrue(String.valueOf(e.getMessage()).contains("Input/output error"), e.toString());
    } finally {
      mode = Mode.NORMAL;
    }
    assertArrayEquals(image.files.get(file), Files.readAllBytes(p));
  }

  @Test
  void identicalFileInTwoImages_isFetchedAndStoredOnce() throws Exception {
    assertTrue(!java.util.Arrays.equals(Files.readAllBytes(mountA.resolve("etc/variant")),
        Files.readAllBytes(mountB.resolve("etc/variant"))), "the two layers differ");
    cache.awaitWrites();
    long requests = stats.requests(RequestKind.BLOB_RANGE);
    long entries = cache.stats().diskEntries();
    long bytes = cache.stats().diskBytes();
    assertArrayEquals(image.files.get(SHARED), Files.readAllBytes(mountA.resolve(SHARED)));
    long afterA = stats.requests(RequestKind.BLOB_RANGE);
    assertTrue(afterA > requests, "the first image fetched it");
    assertArrayEquals(image.files.get(SHARED), Files.readAllBytes(mountB.resolve(SHARED)));
    assertEquals(afterA, stats.requests(RequestKind.BLOB_RANGE), "the second image fetched nothing");
    cache.awaitWrites();
    int chunks = layerA.index().entry(SHARED).orElseThrow().chunks().size();
    assertEquals(entries + chunks, cache.stats().diskEntries(), "stored once");
    // Once on disk: its bytes, a record header per chunk (a pack's index, if one was sealed meanwhile), not twice.
    long grew = cache.stats().diskBytes() - bytes;
    int length = image.files.get(SHARED).length;
    assertTrue(grew >= length && grew < 2L * length, "the disk grew by " + grew + " for " + length + " bytes");
  }
}
