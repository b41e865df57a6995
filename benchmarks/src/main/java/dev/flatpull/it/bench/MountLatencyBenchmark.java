package dev.flatpull.it.bench;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.it.Processes;
import dev.flatpull.pagecache.PageCache;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;

/**
 * Time from a verified layer index to a mounted tree, for the first mount of a process and for later ones, with and
 * (argument {@code warm}) without the FUSE manager's warm-up first, and the first read through each mount. Then the
 * round trip of one FUSE operation (a getxattr the kernel does not cache) on fresh mounts served by flatpull's session
 * loop ({@code LayerMount}: Java worker threads) and by libfuse's own loop (jnr-fuse's {@code mount}: native threads
 * that jnr attaches to the JVM around each callback), alternating in one run. Last, {@link EngineLatency}: lookup,
 * getattr and read latency through each engine and, with {@code --go-fuse LOOPBACK}, go-fuse's loopback file system.
 * Needs root and FUSE. Run with {@code bin/benchmark-mount-latency [warm]}.
 */
public final class MountLatencyBenchmark {
  private MountLatencyBenchmark() {}

  public static void main(String[] args) throws Exception {
    System.out.println(ManagerHashing.install());
    Processes.requireFuse();
    Path dir = Files.createTempDirectory("flatpull-mount-latency");
    try {
      byte[][] files = new byte[100][];
      for (int i = 0; i < files.length; i++) {
        files[i] = ("file " + i + "\n").getBytes();
      }
      InMemoryLayer layer = InMemoryLayer.estargz(LayerTar.numbered(files), dir);
      LazyLayer lazy = new LazyLayer(layer.index(FetchLimits.DEFAULTS), layer.reader(), 64 << 10);
      try (PageCache cache = PageCache.open(dir.resolve("cache"), CacheSettings.DEFAULTS)) {
        if (Arrays.asList(args).contains("warm")) {
          long w = System.nanoTime();
          dev.flatpull.snapshotter.warmup.WarmUp.run(dir.resolve("warm-up"), java.time.InstantSource.system());
          System.out.printf(Locale.ROOT, "warm-up: %.1f ms%n", (System.nanoTime() - w) / 1e6);
        }
        for (int i = 0; i < 5; i++) {
          long t0 = System.nanoTime();
          try (LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
              new LayerContentReader(lazy, cache), FuseEvents.NONE), dir.resolve("m" + i))) {
            long t1 = System.nanoTime();
            Files.readString(m.mountPoint().resolve("f7"));
            long t2 = System.nanoTime();
            System.out.printf(Locale.ROOT, "mount %d: %.1f ms to a mounted tree, first read %.1f ms%n", i,
                (t1 - t0) / 1e6, (t2 - t1) / 1e6);
          }
        }
        operationRoundTrips(lazy, cache, dir);
      }
      int go = Arrays.asList(args).indexOf("--go-fuse");
      EngineLatency.run(dir, go >= 0 ? Path.of(args[go + 1]) : null);
    } finally {
      Processes.deleteTree(dir);
    }
  }

  /** Operations per fresh mount: a cold start makes a few hundred on each of its layers' mounts. */
  private static final int OPERATIONS = 500;

  /**
   * Median microseconds of one getxattr through fresh mounts of each loop, over rounds that alternate them (the
   * first round of each only warms the JIT and is left out).
   */
  /**
   * The baseline: {@code fs} mounted the way jnr-fuse does itself, as flatpull did before {@code FuseSession}:
   * libfuse's own loop on its native threads, ready after jnr-fuse's fixed two seconds. Kept here, to measure against,
   * not in the FUSE adapter; closing the result unmounts.
   */
  private static AutoCloseable mountOnLibfuseThreads(LayerFileSystem fs, Path mountPoint) {
    dev.flatpull.fuse.LibfuseFileSystem lf = fs.libfuse();
    lf.mount(mountPoint, false, false, new String[] {"-o", "ro,allow_other,default_permissions"});
    return lf::umount;
  }

  private static void operationRoundTrips(LazyLayer lazy, PageCache cache, Path dir) throws Exception {
    int rounds = 6;
    double[][] micros = new double[2][rounds - 1];
    for (int round = 0; round < rounds; round++) {
      for (int loop = 0; loop < 2; loop++) {
        LayerFileSystem fs = new LayerFileSystem(LayerTree.of(lazy.index()), new LayerContentReader(lazy, cache),
            FuseEvents.NONE);
        Path at = dir.resolve("ops-" + round + "-" + loop);
        Files.createDirectories(at);
        AutoCloseable mounted;
        if (loop == 0) {
          mounted = LayerMount.mount(fs, at, dev.flatpull.config.FuseSettings.Engine.LIBFUSE);
        } else {
          mounted = mountOnLibfuseThreads(fs, at);
        }
        try (mounted) {
          var view = Files.getFileAttributeView(at.resolve("f7"),
              java.nio.file.attribute.UserDefinedFileAttributeView.class);
          long t0 = System.nanoTime();
          for (int i = 0; i < OPERATIONS; i++) {
            try {
              view.size("absent");
            } catch (java.nio.file.FileSystemException expected) {
              // ENODATA: the answer is the round trip itself.
            }
          }
          if (round > 0) {
            micros[loop][round - 1] = (System.nanoTime() - t0) / 1e3 / OPERATIONS;
          }
        }
      }
    }
    for (double[] m : micros) {
      Arrays.sort(m);
    }
    double ours = micros[0][micros[0].length / 2];
    double theirs = micros[1][micros[1].length / 2];
    System.out.printf(Locale.ROOT, "getxattr round trip, %d on each fresh mount, median of %d mounts: flatpull's"
        + " session loop %.1f us, libfuse's own loop %.1f us (%.2fx)%n", OPERATIONS, rounds - 1, ours, theirs,
        theirs / ours);
  }
}
