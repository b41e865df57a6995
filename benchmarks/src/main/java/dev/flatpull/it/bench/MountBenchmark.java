package dev.flatpull.it.bench;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.it.Cli;
import dev.flatpull.it.Processes;
import dev.flatpull.it.RegistryServer;
import dev.flatpull.it.TestImage;
import dev.flatpull.pagecache.PageCache;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Reads through a real FUSE mount of an eStargz layer served from a local registry process and prints figures: cold
 * sequential throughput of a large file (page cache empty, so every chunk is fetched, verified and stored), cold reads
 * of many files by 8 threads, warm sequential throughput and warm 4 KiB random-read IOPS as ratios to the same file on
 * the local disk, and the process RSS; once with libfuse's multi-threaded loop and once single-threaded ({@code -s}).
 * Run with {@code bin/benchmark-mount}.
 */
public final class MountBenchmark {
  private static final String BIG = "usr/lib/jvm/lib/server/libjvm.so";

  private MountBenchmark() {}

  public static void main(String[] args) throws Exception {
    System.out.println(ManagerHashing.install());
    Path work = Files.createTempDirectory("flatpull-mount-bench");
    try (RegistryServer registry = RegistryServer.start()) {
      TestImage image = TestImage.push(registry, "bench/mount", "plain");
      String esgz = registry.address() + "/bench/mount:esgz";
      Cli.Run c = Cli.inProcess("convert", "--plain-http", "--quiet", "--chunk-size", "1048576", "--level", "6",
          image.reference.toString(), esgz);
      if (c.exitCode() != 0) {
        throw new IllegalStateException(c.stderr());
      }
      Path local = work.resolve("local-copy");
      Files.write(local, image.files.get(BIG));
      List<String> smallFiles = image.files.keySet().stream().filter(f -> !f.equals(BIG)).toList();
      System.out.printf(Locale.ROOT, "%nfile %s: %d bytes; %d other files; layer served by %s%n%n", BIG,
          image.files.get(BIG).length, smallFiles.size(), registry.address());
      System.out.printf(Locale.ROOT, "%-16s %-8s %12s %14s %12s %12s %10s %12s %10s%n", "loop", "decode", "cold MB/s",
          "cold 8thr f/s", "warm MB/s", "local MB/s", "ratio", "warm IOPS", "ratio");
      java.util.concurrent.ExecutorService pool =
          Executors.newFixedThreadPool(Runtime.getRuntime().availableProcessors());
      try {
        for (boolean single : new boolean[] {false, true}) {
          run(single, esgz, work.resolve(single ? "single" : "multi"), local, smallFiles, Runnable::run, "caller");
          run(single, esgz, work.resolve(single ? "single-pool" : "multi-pool"), local, smallFiles, pool, "pool");
        }
      } finally {
        pool.shutdownNow();
      }
      System.out.printf(Locale.ROOT, "%nprocess RSS after both runs: %d MiB%n", Processes.residentBytes(ProcessHandle.current().pid()) >> 20);
    } finally {
      Processes.deleteTree(work);
    }
  }

  private static void run(boolean single, String ref, Path dir, Path local, List<String> smallFiles,
      java.util.concurrent.Executor decoder, String decoderName) throws Exception {
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    ImageReference r = ImageReference.parse(ref);
    try (RegistryClients clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE,
        Sleeper.SYSTEM, InstantSource.system())) {
      RegistryClient client = clients.client(r);
      Descriptor lower = client.resolve(r, Platform.current()).manifest().layers().get(0);
      LazyLayer layer = new LazyLayer(EstargzToc.read(lower, x -> client.readRange(lower.digest(), x), FetchLimits.DEFAULTS),
          x -> client.readRange(lower.digest(), x), 64 * 1024, decoder);
      PageCache cache = PageCache.open(dir.resolve("cache"),
          new CacheSettings(Optional.empty(), 256L << 20, 4L << 30, Duration.ofSeconds(10)));
      try (LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(layer.index()),
          new LayerContentReader(layer, cache), FuseEvents.NONE), dir.resolve("mnt"), single)) {
        Path big = m.mountPoint().resolve(BIG);
        double cold = sequentialMBps(big);
        List<String> inLayer = smallFiles.stream().filter(f -> layer.index().entry(f)
            .filter(e -> e.type() == dev.flatpull.fetcher.layer.EntryType.REG).isPresent()).toList();
        double coldFiles = parallelFilesPerSecond(m.mountPoint(), inLayer);
        double warm = best(() -> sequentialMBps(big));
        double localWarm = best(() -> sequentialMBps(local));
        double iops = best(() -> randomIops(big));
        double localIops = best(() -> randomIops(local));
        System.out.printf(Locale.ROOT, "%-16s %-8s %12.1f %14.1f %12.1f %12.1f %10.2f %12.0f %10.2f%n",
            single ? "single (-s)" : "multi-threaded", decoderName, cold, coldFiles, warm, localWarm, warm / localWarm,
            iops, iops / localIops);
      }
      cache.close();
    }
  }

  @FunctionalInterface
  private interface Measure {
    double run() throws Exception;
  }

  private static double best(Measure m) throws Exception {
    double best = 0;
    for (int i = 0; i < 5; i++) {
      best = Math.max(best, m.run());
    }
    return best;
  }

  private static double sequentialMBps(Path p) throws IOException {
    byte[] buf = new byte[1 << 20];
    long n = 0;
    long start = System.nanoTime();
    try (InputStream in = Files.newInputStream(p)) {
      int r;
      while ((r = in.read(buf)) > 0) {
        n += r;
      }
    }
    return n / 1e6 / ((System.nanoTime() - start) / 1e9);
  }

  private static double parallelFilesPerSecond(Path root, List<String> files) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(8);
    try {
      long start = System.nanoTime();
      List<Future<byte[]>> all = new ArrayList<>();
      for (String f : files) {
        all.add(pool.submit(() -> Files.readAllBytes(root.resolve(f))));
      }
      for (Future<byte[]> f : all) {
        f.get();
      }
      return files.size() / ((System.nanoTime() - start) / 1e9);
    } finally {
      pool.shutdownNow();
    }
  }

  private static double randomIops(Path p) throws IOException {
    Random rnd = new Random(1);
    ByteBuffer buf = ByteBuffer.allocate(4096);
    try (FileChannel ch = FileChannel.open(p, StandardOpenOption.READ)) {
      long size = ch.size();
      int reads = 0;
      long start = System.nanoTime();
      long deadline = start + 1_000_000_000L;
      while (System.nanoTime() < deadline) {
        for (int i = 0; i < 256; i++) {
          buf.clear();
          ch.read(buf, (rnd.nextLong() & Long.MAX_VALUE) % (size - 4096) & ~4095L);
          reads++;
        }
      }
      return reads / ((System.nanoTime() - start) / 1e9);
    }
  }
}
