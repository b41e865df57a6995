package dev.flatpull.it.bench;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.core.ByteRange;
import dev.flatpull.fetcher.convert.ImageConverter;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.it.RegistryServer;
import dev.flatpull.it.TestImage;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.InstantSource;
import java.util.List;
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

  private RegistryServer registry;
  private RegistryClients clients;
  private RegistryClient client;
  private LazyLayer layer;
  private LayerEntry file;
  private Descriptor blob;
  private ByteRange fileRange;
  private Path work;

  @Setup(Level.Trial)
  public void start() throws Exception {
    registry = RegistryServer.start();
    TestImage image = TestImage.push(registry, "bench/sample", "plain");
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE, Sleeper.SYSTEM, InstantSource.system());
    ImageReference src = image.reference;
    ImageReference dst = src.withTag("lazy");
    work = Files.createTempDirectory("flatpull-bench");
    client = clients.client(dst);
    ImageConverter.Result r = new ImageConverter(config.limits(), work, line -> {})
        .convert(clients.client(src), src, client, dst,
            new ImageConverter.Options(format, 1 << 20, List.of(), format == LayerFormat.ESTARGZ ? 6 : 3, Platform.current()));
    blob = r.layers().get(0);
    layer = new LayerOpener(client, config, work).open(blob);
    file = layer.index().entry(FILE).orElseThrow();
    long first = file.chunks().get(0).stored().offset();
    long last = file.chunks().get(file.chunks().size() - 1).stored().end();
    fileRange = ByteRange.between(first, last);
    System.out.printf("%n# %s: %s is %d bytes in %d chunks, %d bytes stored%n",
        format, FILE, file.size(), file.chunks().size(), fileRange.length());
  }

  @TearDown(Level.Trial)
  public void stop() throws Exception {
    clients.close();
    registry.close();
    try (var walk = Files.walk(work)) {
      walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
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
