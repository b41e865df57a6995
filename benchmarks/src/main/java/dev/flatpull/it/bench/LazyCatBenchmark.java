package dev.flatpull.it.bench;

import dev.flatpull.core.ByteRange;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.registry.RegistryClient;
import java.io.OutputStream;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * Lazy {@code cat} of the test image's largest file (the JDK's libjvm.so, about 24 MB) from a real local registry, in
 * each lazy format: fetch coalesced chunk ranges, decompress, verify every chunk digest. {@code rawRangeRead} is the
 * baseline measured in the same run: the same registry sending the same file's compressed bytes in one range request,
 * with no decompression or verification. Their ratio is the cost of the lazy read path; ops/s x file size is MB/s.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class LazyCatBenchmark {
  private static final String FILE = "usr/lib/jvm/lib/server/libjvm.so";

  @Param({"ESTARGZ", "ZSTD_CHUNKED"})
  public LayerFormat format;

  private SampleLazyLayer sample;
  private RegistryClient client;
  private LazyLayer layer;
  private LayerEntry file;
  private Descriptor blob;
  private ByteRange fileRange;

  @Setup(Level.Trial)
  public void start() throws Exception {
    sample = new SampleLazyLayer(format);
    client = sample.client;
    blob = sample.blob;
    layer = sample.layer;
    file = layer.index().entry(FILE).orElseThrow();
    long first = file.chunks().get(0).stored().offset();
    long last = file.chunks().get(file.chunks().size() - 1).stored().end();
    fileRange = ByteRange.between(first, last);
    System.out.printf("%n# %s: %s is %d bytes in %d chunks, %d bytes stored%n",
        format, FILE, file.size(), file.chunks().size(), fileRange.length());
  }

  @TearDown(Level.Trial)
  public void stop() throws Exception {
    sample.close();
  }

  @Benchmark
  public void lazyCat() throws Exception {
    layer.copyTo(file, OutputStream.nullOutputStream());
  }

  @Benchmark
  public byte[] rawRangeRead() throws Exception {
    return client.readRange(blob.digest(), fileRange);
  }
}
