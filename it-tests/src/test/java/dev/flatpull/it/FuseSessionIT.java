package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.ByteRange;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The FUSE session loop on threads the mount owns ({@code FuseSession}): every callback runs on a worker the mount's
 * executor started (Java threads, attached to the JVM once, not around each callback as libfuse's own threads were),
 * workers grow while reads block, one worker only with {@code -s}, and every worker ends at unmount.
 */
class FuseSessionIT {
  private static final int FILES = 6;
  private static final int FILE_SIZE = 64 << 10;

  private Path dir;
  private byte[][] contents;
  private LazyLayer layer;
  private PageCache cache;
  // When set, blob reads (after the TOC's) count down here and wait for release.
  private volatile CountDownLatch inside;
  private final CountDownLatch release = new CountDownLatch(1);
  private final Set<Thread> started = ConcurrentHashMap.newKeySet();
  private final Set<Thread> serving = ConcurrentHashMap.newKeySet();
  private final Executor workers = task -> {
    Thread t = new Thread(task, "test-fuse-worker");
    t.setDaemon(true);
    started.add(t);
    t.start();
  };

  @BeforeEach
  void setUp() throws Exception {
    Processes.requireFuse();
    dir = Files.createTempDirectory("flatpull-fuse-session");
    Random random = new Random(7);
    contents = new byte[FILES][];
    for (int i = 0; i < FILES; i++) {
      contents[i] = new byte[FILE_SIZE];
      random.nextBytes(contents[i]);
    }
    InMemoryLayer small = InMemoryLayer.estargz(LayerTar.numbered(contents), dir);
    byte[] blob = small.blob();
    Descriptor d = small.descriptor();
    BlobReader reader = (ByteRange range) -> {
      CountDownLatch gate = inside;
      if (gate != null) {
        gate.countDown();
        try {
          release.await(30, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      return Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
    };
    layer = new LazyLayer(EstargzToc.read(d, reader, FetchLimits.DEFAULTS), reader, 0);
    cache = PageCache.open(dir.resolve("cache"), CacheSettings.DEFAULTS);
  }

  @AfterEach
  void tearDown() throws Exception {
    release.countDown();
    cache.close();
    Processes.deleteTree(dir);
  }

  private LayerMount mount(boolean singleThreaded) throws Exception {
    FuseEvents events = new FuseEvents() {
      @Override
      public void readServed(String path, long offset, int bytes) {
        serving.add(Thread.currentThread());
      }

      @Override
      public void operationFailed(String operation, String path, int errno, Throwable cause) {}
    };
    LayerFileSystem fs = new LayerFileSystem(LayerTree.of(layer.index()), new LayerContentReader(layer, cache), events);
    // A space in the mount point: the kernel's table escapes it, and the mount must still be found there.
    return LayerMount.mount(fs, dir.resolve("mnt point"), singleThreaded, workers);
  }

  @Test
  void readsBlockedOnTheRegistryAreServedAtOnce_onWorkersTheMountStarted_whichAllEndAtUnmount() throws Exception {
    List<Thread> readers = new ArrayList<>();
    byte[][] got = new byte[FILES][];
    try (LayerMount m = mount(false)) {
      assertTrue(LayerMount.isMounted(m.mountPoint()), "mounted at " + m.mountPoint());
      CountDownLatch all = new CountDownLatch(FILES);
      inside = all;
      for (int i = 0; i < FILES; i++) {
        int k = i;
        Thread t = new Thread(() -> {
          try {
            got[k] = Files.readAllBytes(m.mountPoint().resolve("f" + k));
          } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
          }
        });
        t.start();
        readers.add(t);
      }
      // Each read waits in the blob reader until released: all of them get there only if served side by side.
      assertTrue(all.await(20, TimeUnit.SECONDS), (FILES - all.getCount()) + " of " + FILES
          + " blocked reads reached the registry at once");
      inside = null;
      release.countDown();
      for (Thread t : readers) {
        t.join(20_000);
      }
      for (int i = 0; i < FILES; i++) {
        assertArrayEquals(contents[i], got[i], "f" + i);
      }
      assertTrue(serving.size() >= FILES, "reads served on " + serving.size() + " threads");
      assertTrue(started.containsAll(serving), "a callback ran on a thread the mount did not start: " + serving);
    }
    for (Thread t : started) {
      t.join(10_000);
      assertFalse(t.isAlive(), "a FUSE worker still runs after unmount");
    }
    assertFalse(LayerMount.isMounted(dir.resolve("mnt point")));
  }

  @Test
  void singleThreaded_servesEverythingOnOneWorker() throws Exception {
    try (LayerMount m = mount(true)) {
      for (int i = 0; i < FILES; i++) {
        assertArrayEquals(contents[i], Files.readAllBytes(m.mountPoint().resolve("f" + i)), "f" + i);
      }
      assertEquals(1, started.size(), "workers started");
      assertEquals(started, serving);
    }
    Thread only = started.iterator().next();
    only.join(10_000);
    assertFalse(only.isAlive());
  }
}
