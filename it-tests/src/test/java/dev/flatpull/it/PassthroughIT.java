package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.FuseSettings;
import dev.flatpull.core.Await;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.fuse.BackingFiles;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * FUSE passthrough on the kernel engine, through real mounts: a file whose every chunk is verified on the node gets a
 * backing file assembled from them, and its next open is read by the kernel from it with no FUSE read and no fetch; a
 * file read in part never is; an open passthrough file outlives the eviction of its chunks and of its backing file; the
 * kernel's permission checks still hold; and a kernel that does not offer passthrough (its INIT offer masked) gets
 * opens left to the kernel as before, said in one log line.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class PassthroughIT {
  private static final Duration WAIT = Duration.ofSeconds(30);
  private static final int MIN_BYTES = 64 << 10;
  private final Cleanup cleanup = new Cleanup();
  private final AtomicInteger blobReads = new AtomicInteger();
  private byte[][] files;
  private Path work;
  private Path cacheDir;
  private PageCache cache;
  private LazyLayer lazy;
  private BackingFiles backing;
  private LayerMount mount;

  @BeforeAll
  void setUp() throws Exception {
    Processes.requireFuse();
    work = cleanup.deleteLater(Files.createTempDirectory("flatpull-passthrough",
        PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwxr-xr-x"))));
    Random random = new Random(11);
    // Every file more than one 16 KiB chunk; f4 below the passthrough minimum.
    int[] sizes = {(1 << 20) + 1000, (1 << 20) + 5, 300_000, 200_000, 20_000};
    files = new byte[sizes.length][];
    for (int i = 0; i < sizes.length; i++) {
      files[i] = new byte[sizes[i]];
      random.nextBytes(files[i]);
    }
    int[] modes = new int[sizes.length];
    Arrays.fill(modes, 0644);
    modes[3] = 0600;
    InMemoryLayer layer = InMemoryLayer.estargz(LayerTar.numbered(modes, files), work);
    byte[] blob = layer.blob();
    BlobReader r = range -> {
      blobReads.incrementAndGet();
      return Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
    };
    lazy = new LazyLayer(EstargzToc.read(layer.descriptor(), r, FetchLimits.DEFAULTS), r, 64 << 10);
    cacheDir = work.resolve("cache");
    cache = cleanup.add(PageCache.open(cacheDir, CacheSettings.DEFAULTS));
    ExecutorService assembler = Executors.newSingleThreadExecutor();
    cleanup.add((AutoCloseable) assembler::shutdownNow);
    backing = new BackingFiles(cache, MIN_BYTES, assembler, () -> true);
    mount = mount("mnt", 0);
  }

  private LayerMount mount(String at, long ignoredKernelFlags) throws Exception {
    return cleanup.add(LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
        new LayerContentReader(lazy, cache, 0, new dev.flatpull.fuse.ReadActivity()), FuseEvents.NONE),
        work.resolve(at), FuseSettings.Engine.KERNEL, backing, ignoredKernelFlags));
  }

  @AfterAll
  void tearDown() throws Exception {
    cleanup.close();
  }

  private long reads(LayerMount m) {
    return m.requests().get("read");
  }

  /** Reads file {@code i} whole through the mount, then waits for a backing file of exactly its bytes. */
  private void readWholeAndAwaitItsBackingFile(int i) throws Exception {
    assertArrayEquals(files[i], Files.readAllBytes(mount.mountPoint().resolve("f" + i)));
    Await.until(WAIT, () -> {
      for (Path p : backingFiles()) {
        if (Arrays.equals(files[i], Files.readAllBytes(p))) {
          return true;
        }
      }
      return false;
    }, () -> "a backing file for f" + i + ": " + backing.stats());
  }

  private List<Path> backingFiles() throws Exception {
    try (var names = Files.list(cacheDir.resolve("named"))) {
      return names.filter(p -> p.getFileName().toString().startsWith("backing-")).toList();
    }
  }

  @Test
  void theKernelsInitAnswer_grantsPassthrough_andOpensAreAnswered() {
    String negotiated = mount.negotiated().orElseThrow();
    assertTrue(negotiated.contains("passthrough yes"), negotiated);
    assertTrue(negotiated.contains("open answered"), negotiated);
  }

  @Test
  void aFileReadWhole_getsABackingFile_andItsNextOpenIsReadByTheKernel_withNoFuseReadAndNoFetch() throws Exception {
    readWholeAndAwaitItsBackingFile(0);
    for (Path p : backingFiles()) {
      assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(p)), p.toString());
    }
    assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(cacheDir.resolve("named"))));
    // Nothing of it left in the kernel's page cache: the FUSE file's pages would serve a cached open without a read.
    Processes.dropCaches();
    long reads = reads(mount);
    long opens = mount.passthroughOpens();
    int fetches = blobReads.get();
    assertArrayEquals(files[0], Files.readAllBytes(mount.mountPoint().resolve("f0")));
    assertEquals(opens + 1, mount.passthroughOpens(), mount.requests().toString());
    assertEquals(reads, reads(mount), "read by the kernel from the backing file: " + mount.requests());
    assertEquals(fetches, blobReads.get());
  }

  @Test
  void aFileReadInPart_isNeverPassedThrough_andItsOtherBytesStillReachTheLazyLayer() throws Exception {
    Path f1 = mount.mountPoint().resolve("f1");
    byte[] head = new byte[4096];
    try (FileChannel ch = FileChannel.open(f1, StandardOpenOption.READ)) {
      ch.read(ByteBuffer.wrap(head), 0);
    }
    assertArrayEquals(Arrays.copyOf(files[1], 4096), head);
    long opens = mount.passthroughOpens();
    long reads = reads(mount);
    int fetches = blobReads.get();
    ByteBuffer tail = ByteBuffer.allocate(4096);
    try (FileChannel ch = FileChannel.open(f1, StandardOpenOption.READ)) {
      ch.read(tail, (1 << 20) - 100_000);
    }
    assertArrayEquals(Arrays.copyOfRange(files[1], (1 << 20) - 100_000, (1 << 20) - 100_000 + 4096), tail.array());
    assertEquals(opens, mount.passthroughOpens(), "an incomplete file is opened cached");
    assertTrue(reads(mount) > reads, mount.requests().toString());
    assertTrue(blobReads.get() > fetches);
  }

  @Test
  void smallFiles_areNotGivenBackingFiles() throws Exception {
    long opens = mount.passthroughOpens();
    assertArrayEquals(files[4], Files.readAllBytes(mount.mountPoint().resolve("f4")));
    assertArrayEquals(files[4], Files.readAllBytes(mount.mountPoint().resolve("f4")));
    assertEquals(opens, mount.passthroughOpens());
    for (Path p : backingFiles()) {
      assertTrue(Files.size(p) != files[4].length, p.toString());
    }
  }

  @Test
  void anOpenPassthroughFile_outlivesTheEvictionOfItsChunksAndOfItsBackingFile() throws Exception {
    readWholeAndAwaitItsBackingFile(2);
    Path f2 = mount.mountPoint().resolve("f2");
    long opens = mount.passthroughOpens();
    long releases;
    try (FileChannel ch = FileChannel.open(f2, StandardOpenOption.READ)) {
      assertEquals(opens + 1, mount.passthroughOpens());
      cache.empty();
      for (Path p : backingFiles()) {
        Files.delete(p);
      }
      Processes.dropCaches();
      long reads = reads(mount);
      int fetches = blobReads.get();
      ByteBuffer all = ByteBuffer.allocate(files[2].length);
      while (all.hasRemaining() && ch.read(all, all.position()) > 0) {
        // until the end
      }
      assertArrayEquals(files[2], all.array());
      assertEquals(reads, reads(mount), mount.requests().toString());
      assertEquals(fetches, blobReads.get());
      releases = mount.requests().get("release");
    }
    // The kernel sends a close's RELEASE after close returns: an open before it arrives joins the open passthrough
    // (the backing file the kernel still holds), which is right but not what is tested here.
    long before = releases;
    Await.until(WAIT, () -> mount.requests().get("release") > before, () -> "the RELEASE of f2: " + mount.requests());
    // Its chunks gone, the file is incomplete again: opened cached (what the kernel kept of it, or fetched again).
    opens = mount.passthroughOpens();
    assertArrayEquals(files[2], Files.readAllBytes(f2));
    assertEquals(opens, mount.passthroughOpens());
  }

  /** The kernel checks the TOC's modes (default_permissions) on the FUSE file, whatever backs it. */
  @Test
  void anUnprivilegedUser_readsOnlyWhatTheModesAllow_fromPassthroughFiles() throws Exception {
    readWholeAndAwaitItsBackingFile(3);
    long opens = mount.passthroughOpens();
    assertArrayEquals(files[3], Files.readAllBytes(mount.mountPoint().resolve("f3")));
    assertEquals(opens + 1, mount.passthroughOpens(), "f3 is passed through for its owner");
    Processes.Result secret = Processes.run(List.of("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
        "sha256sum", mount.mountPoint().resolve("f3").toString()), 30);
    assertTrue(secret.exitCode() != 0 && secret.stderr().contains("Permission denied"), secret.stderr());
  }

  /** A kernel without passthrough (its INIT offer masked): one log line, and opens left to the kernel as before. */
  @Test
  void aKernelWithoutPassthrough_fallsBackWithOneLogLine_andItsFilesAreReadThroughFuse() throws Exception {
    readWholeAndAwaitItsBackingFile(0);
    List<String> lines = new ArrayList<>();
    java.util.logging.Logger logger = java.util.logging.Logger.getLogger("dev.flatpull.fuse.KernelSession");
    java.util.logging.Handler capture = new java.util.logging.Handler() {
      @Override
      public synchronized void publish(java.util.logging.LogRecord record) {
        if (record.getMessage().contains("passthrough")) {
          lines.add(record.getMessage());
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    logger.addHandler(capture);
    LayerMount masked;
    try {
      masked = mount("masked", LayerMount.KERNEL_PASSTHROUGH);
      assertArrayEquals(files[0], Files.readAllBytes(masked.mountPoint().resolve("f0")));
      assertArrayEquals(files[2], Files.readAllBytes(masked.mountPoint().resolve("f2")));
    } finally {
      logger.removeHandler(capture);
    }
    synchronized (capture) {
      assertEquals(1, lines.size(), lines.toString());
      assertTrue(lines.get(0).contains("passthrough no (the kernel does not offer it"), lines.get(0));
      assertTrue(lines.get(0).contains("open without a round trip"), lines.get(0));
    }
    assertEquals(0, masked.passthroughOpens());
    assertTrue(reads(masked) > 0, masked.requests().toString());
    assertTrue(masked.requests().get("open") <= 1, "opens left to the kernel: " + masked.requests());
  }
}
