package dev.flatpull.it.bench;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.trace.TraceRecorder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;

/**
 * The cost of recording on the read path, as the FUSE manager runs it for every FUSE read: a 4 KiB read of a file of
 * an eStargz layer through {@link LayerContentReader} from a warm page cache (the fastest read there is, so the
 * recorder's share is the largest it can be), then the recorder's tap, with and without a recording in progress.
 * {@code main} runs both and prints reads per second and their ratio.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Fork(value = 1, jvmArgsAppend = "-Xmx3g")
public class RecordingOverheadBenchmark {
  private static final String FILE = "usr/lib/jvm/lib/server/libjvm.so";
  private static final String PATH = "/" + FILE;

  @Param({"false", "true"})
  public boolean recording;

  private SampleLazyLayer sample;
  private PageCache cache;
  private LayerContentReader reader;
  private LayerEntry file;
  private LazyLayer layer;
  private final TraceRecorder recorder = new TraceRecorder();
  private TraceRecorder.ReadTap tap;
  private final byte[] buffer = new byte[4096];
  private long next;
  private Path work;

  @Setup(Level.Trial)
  public void start() throws Exception {
    sample = new SampleLazyLayer(LayerFormat.ESTARGZ);
    layer = sample.layer;
    work = sample.work;
    file = layer.index().entry(FILE).orElseThrow();
    cache = PageCache.open(work.resolve("cache"), new CacheSettings(Optional.empty(), 512L << 20, 1L << 30,
        CacheSettings.DEFAULTS.reservationWait()));
    reader = new LayerContentReader(layer, cache);
    for (long off = 0; off < file.size(); off += buffer.length) { // warm the page cache
      reader.read(file, off, buffer, buffer.length);
    }
    tap = recorder.tap(sample.blob.digest().toString());
  }

  @Setup(Level.Iteration)
  public void startRecording() {
    if (recording) {
      recorder.start();
    }
  }

  @TearDown(Level.Iteration)
  public void stopRecording() {
    if (recording) {
      recorder.stop();
    }
  }

  @TearDown(Level.Trial)
  public void stop() throws Exception {
    cache.close();
    sample.close();
  }

  /** One FUSE read as the manager serves it: content, then the recorder's tap. */
  @Benchmark
  public int read() throws Exception {
    // Strided through the file so that reads land on different pages and chunks, as a start-up's do.
    long offset = (next = (next + 7 * 4096 + 512) % (file.size() - buffer.length));
    int n = reader.read(file, offset, buffer, buffer.length);
    tap.read(PATH, offset, n);
    return n;
  }

  public static void main(String[] args) throws Exception {
    var options = new OptionsBuilder().include(RecordingOverheadBenchmark.class.getSimpleName())
        .warmupIterations(3).warmupTime(TimeValue.seconds(1)).measurementIterations(5)
        .measurementTime(TimeValue.seconds(1)).build();
    double off = 0;
    double on = 0;
    for (RunResult r : new Runner(options).run()) {
      double score = r.getPrimaryResult().getScore();
      if (r.getParams().getParam("recording").equals("true")) {
        on = score;
      } else {
        off = score;
      }
    }
    System.out.printf(Locale.ROOT, "%nreads/s not recording %.0f, recording %.0f: recording runs at %.2f of the speed"
        + " (%.0f ns more per read)%n", off, on, on / off, 1e9 / on - 1e9 / off);
    fuseLevel();
  }

  /**
   * The same at the FUSE level: the file read sequentially through a real FUSE mount with the kernel's page cache
   * dropped before each pass (so every page is a FUSE request) and flatpull's page cache warm, alternating passes with
   * and without a recording.
   */
  private static void fuseLevel() throws Exception {
    RecordingOverheadBenchmark b = new RecordingOverheadBenchmark();
    b.start();
    try (dev.flatpull.fuse.LayerMount m = dev.flatpull.fuse.LayerMount.mount(new dev.flatpull.fuse.LayerFileSystem(
        dev.flatpull.fuse.LayerTree.of(b.layer.index()), b.reader, new dev.flatpull.fuse.FuseEvents() {
          @Override
          public void readServed(String path, long offset, int bytes) {
            b.tap.read(path, offset, bytes);
          }
        }), b.work.resolve("mnt"))) {
      Path big = m.mountPoint().resolve(FILE);
      List<Double> off = new java.util.ArrayList<>();
      List<Double> on = new java.util.ArrayList<>();
      for (int pass = 0; pass < 22; pass++) {
        boolean recording = pass % 2 == 1;
        if (recording) {
          b.recorder.start();
        }
        dev.flatpull.it.Processes.run(List.of("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"), 60);
        long start = System.nanoTime();
        long n = 0;
        byte[] buf = new byte[1 << 20];
        try (var in = Files.newInputStream(big)) {
          for (int r; (r = in.read(buf)) > 0; ) {
            n += r;
          }
        }
        double mbps = n / 1e6 / ((System.nanoTime() - start) / 1e9);
        if (recording) {
          long pages = b.recorder.stop().values().stream().mapToLong(dev.flatpull.trace.LayerTrace::pages).sum();
          if (pass > 1) {
            on.add(mbps);
          }
          if (pass == 1) {
            System.out.printf(Locale.ROOT, "a recorded pass read %d pages%n", pages);
          }
        } else if (pass > 1) {
          off.add(mbps);
        }
      }
      System.out.printf(Locale.ROOT, "passes not recording %s MB/s, recording %s MB/s%n", off, on);
      off.sort(null);
      on.sort(null);
      double mOff = off.get(off.size() / 2);
      double mOn = on.get(on.size() / 2);
      System.out.printf(Locale.ROOT, "FUSE, kernel cache dropped, median of %d passes: %.0f MB/s not recording, %.0f MB/s"
          + " recording: %.2f%n", off.size(), mOff, mOn, mOn / mOff);
    } finally {
      b.stop();
    }
  }
}
