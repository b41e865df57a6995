package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.FuseSettings;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * Mounts come and go while one mount keeps serving reads, and full collections run between them: what a mount leaves
 * behind (a libfuse mount's jnr-fuse binding, a class jnr-ffi generates per instance, with native stubs and closures
 * its finalizers free) is collected and its classes unloaded while the serving mount's native calls go on. A JVM that
 * crashed here fails the run, as a FUSE manager that crashed would take every running container's root file system
 * with it. It did not reproduce the crashes seen under Shenandoah (docs/development.md), under G1 or Shenandoah: it
 * keeps what it does cover, the serving mount's reads across the churn.
 */
class MountChurnIT {
  private static final int ROUNDS = 25;

  @Test
  void aMountKeepsServing_whileOthersAreMountedUnmountedAndCollected() throws Exception {
    Processes.requireFuse();
    try (Cleanup cleanup = new Cleanup()) {
      Path work = cleanup.deleteLater(Files.createTempDirectory("flatpull-mount-churn"));
      Random random = new Random(7);
      byte[][] files = new byte[8][];
      for (int i = 0; i < files.length; i++) {
        files[i] = new byte[20_000 + i];
        random.nextBytes(files[i]);
      }
      InMemoryLayer layer = InMemoryLayer.estargz(LayerTar.numbered(files), work);
      byte[] blob = layer.blob();
      BlobReader r = range -> Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
      LazyLayer lazy = new LazyLayer(EstargzToc.read(layer.descriptor(), r, FetchLimits.DEFAULTS), r, 64 << 10);
      PageCache cache = cleanup.add(PageCache.open(work.resolve("cache"), CacheSettings.DEFAULTS));
      // libfuse adapters made and dropped before the serving mount, and collected (run alone, before the process's
      // first mount binds its system calls, as in a manager whose spares were collected early).
      for (int i = 0; i < 8; i++) {
        new LayerFileSystem().libfuse();
      }
      System.gc();
      System.runFinalization();
      System.gc();
      LayerMount serving = cleanup.add(LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
          new LayerContentReader(lazy, cache), FuseEvents.NONE), work.resolve("serving"), FuseSettings.Engine.KERNEL));

      AtomicReference<Throwable> failed = new AtomicReference<>();
      AtomicLong reads = new AtomicLong();
      Thread reader = new Thread(() -> {
        try {
          for (int i = 0; !Thread.currentThread().isInterrupted(); i++) {
            // A name never asked before: the kernel asks the mount (a lookup and its answer, written through the
            // process's native binding) rather than its caches.
            if (Files.exists(serving.mountPoint().resolve("absent-" + i))) {
              throw new AssertionError("absent-" + i + " exists");
            }
            assertArrayEquals(files[i % files.length],
                Files.readAllBytes(serving.mountPoint().resolve("f" + (i % files.length))));
            reads.incrementAndGet();
          }
        } catch (java.nio.channels.ClosedByInterruptException e) {
          // Stopped while reading: the churn is over.
        } catch (Throwable t) {
          failed.set(t);
        }
      }, "churn-reader");
      reader.start();
      try {
        for (int round = 0; round < ROUNDS && failed.get() == null; round++) {
          try (LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
              new LayerContentReader(lazy, cache), FuseEvents.NONE), work.resolve("churn-" + round),
              round % 2 == 0 ? FuseSettings.Engine.KERNEL : FuseSettings.Engine.LIBFUSE)) {
            assertArrayEquals(files[round % files.length],
                Files.readAllBytes(m.mountPoint().resolve("f" + (round % files.length))));
          }
          // A full collection unloads the classes nothing holds any more, and runs their cleanups.
          System.gc();
          System.runFinalization();
        }
      } finally {
        reader.interrupt();
        reader.join(30_000);
      }
      assertEquals(null, failed.get(), () -> "the serving mount failed: " + failed.get());
      assertArrayEquals(files[0], Files.readAllBytes(serving.mountPoint().resolve("f0")));
      assertTrue(reads.get() > ROUNDS, "the serving mount answered " + reads.get() + " lookups during the churn");
      System.out.println("lookups and reads through the serving mount during the churn: " + reads.get());
    }
  }
}
