package dev.flatpull.it.bench;

import dev.flatpull.snapshotter.overlay.ListFilter;
import dev.flatpull.snapshotter.overlay.OverlaySnapshotter;
import dev.flatpull.snapshotter.overlay.RemoteLayers;
import dev.flatpull.snapshotter.overlay.SnapshotMount;
import dev.flatpull.snapshotter.overlay.SnapshotterCounters;
import dev.flatpull.it.Processes;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.time.InstantSource;
import java.util.concurrent.AbstractExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * List latency while a large snapshot (1 GiB in 16,384 files by default) is being removed, against idle list latency,
 * for removal outside the storage lock (flatpull's) and deletion inside it (the common way), in the same run:
 * {@code RemovalBenchmark [GiB] [fileKiB]}.
 */
public final class RemovalBenchmark {
  private RemovalBenchmark() {}

  public static void main(String[] args) throws Exception {
    double gib = args.length > 0 ? Double.parseDouble(args[0]) : 1.0;
    int fileKib = args.length > 1 ? Integer.parseInt(args[1]) : 64;
    long files = (long) (gib * (1L << 30) / (fileKib * 1024L));
    System.out.printf(Locale.ROOT, "removing a snapshot of %.2f GiB in %d files of %d KiB, 200 other snapshots%n",
        gib, files, fileKib);
    double[] in = run(true, files, fileKib);
    double[] st = run(false, files, fileKib);
    System.out.printf(Locale.ROOT, "%nslowest list during removal / idle p99: inside the lock %.0fx, staged %.1fx%n",
        in[3] / in[0], st[3] / st[0]);
    System.out.printf(Locale.ROOT, "slowest list during removal: inside the lock %.3f s, staged %.4f s (%.0fx less)%n",
        in[3], st[3], in[3] / st[3]);
    System.out.printf(Locale.ROOT, "Remove call: inside the lock %.3f s, staged %.4f s%n", in[4], st[4]);
  }

  /**
   * The baseline: a deleter that runs the staged directory's deletion on the thread that hands it over, which the
   * snapshotter does under its lock; so the removal deletes under the lock, as most snapshotters do.
   */
  private static final class OnTheCallersThread extends AbstractExecutorService {
    private volatile boolean shutdown;

    @Override
    public void execute(Runnable task) {
      task.run();
    }

    @Override
    public void shutdown() {
      shutdown = true;
    }

    @Override
    public List<Runnable> shutdownNow() {
      shutdown = true;
      return List.of();
    }

    @Override
    public boolean isShutdown() {
      return shutdown;
    }

    @Override
    public boolean isTerminated() {
      return shutdown;
    }

    @Override
    public boolean awaitTermination(long timeout, TimeUnit unit) {
      return true;
    }
  }

  /**
   * Returns {idle p99, removal median, removal p99, removal max, remove call} in seconds.
   *
   * @param inLock deletes under the snapshotter's lock (the baseline), else on its deletion thread (flatpull's)
   */
  private static double[] run(boolean inLock, long files, int fileKib) throws Exception {
    String mode = inLock ? "IN_LOCK" : "STAGED";
    Path root = Files.createTempDirectory(Path.of("/var/tmp"), "flatpull-removal-bench");
    OverlaySnapshotter.Environment env = inLock
        ? new OverlaySnapshotter.Environment(System::nanoTime, InstantSource.system(), new OnTheCallersThread())
        : OverlaySnapshotter.Environment.system();
    try (OverlaySnapshotter s = OverlaySnapshotter.open(root, RemoteLayers.NONE, new SnapshotterCounters(), env)) {
      for (int i = 0; i < 200; i++) {
        s.prepare("default/1/other-" + i, "", Map.of("containerd.io/gc.root", "x"));
      }
      List<SnapshotMount> m = s.prepare("default/1/big", "", Map.of());
      Path fs = Path.of(m.get(0).source());
      byte[] block = new byte[fileKib * 1024];
      new java.util.Random(1).nextBytes(block);
      for (long i = 0; i < files; i++) {
        Path dir = fs.resolve("d" + (i % 64));
        if (i < 64) {
          Files.createDirectories(dir);
        }
        Files.write(dir.resolve("f" + i), block);
      }
      Processes.run(List.of("sync"), 600);
      List<Double> idle = new ArrayList<>();
      for (int i = 0; i < 600; i++) {
        double t = time(() -> s.list(ListFilter.ALL));
        if (i >= 300) { // the first 300 warm the JIT up
          idle.add(t);
        }
      }
      List<Double> during = Collections.synchronizedList(new ArrayList<>());
      AtomicBoolean done = new AtomicBoolean();
      Thread lister = new Thread(() -> {
        while (!done.get()) {
          try {
            during.add(time(() -> s.list(ListFilter.ALL)));
            Thread.sleep(1);
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
        }
      });
      long t0 = System.nanoTime();
      lister.start();
      Thread.sleep(20);
      double remove = time(() -> s.remove("default/1/big"));
      s.awaitDeletions();
      double total = (System.nanoTime() - t0) / 1e9;
      done.set(true);
      lister.join();
      double[] r = {pct(idle, 0.99), pct(during, 0.5), pct(during, 0.99), pct(during, 1.0), remove};
      System.out.printf(Locale.ROOT, "%-8s idle list p99 %.4f s | during removal (%.2f s, %d lists): median %.4f s,"
          + " p99 %.4f s, max %.4f s | Remove call %.4f s%n", mode, r[0], total, during.size(), r[1], r[2], r[3], r[4]);
      return r;
    } finally {
      Processes.deleteTree(root);
    }
  }

  @FunctionalInterface
  private interface Work {
    void run() throws Exception;
  }

  private static double time(Work w) throws Exception {
    long t = System.nanoTime();
    w.run();
    return (System.nanoTime() - t) / 1e9;
  }

  private static double pct(List<Double> xs, double p) {
    List<Double> sorted = new ArrayList<>(xs);
    Collections.sort(sorted);
    return sorted.get(Math.min(sorted.size() - 1, (int) Math.floor(p * (sorted.size() - 1))));
  }
}
