package dev.flatpull.it.bench;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import java.io.BufferedOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
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

/**
 * How fast a layer's TOC becomes a verified index: gunzip/unzstd, tar, JSON, validation and digest check, from blob
 * bytes in memory (no network). Entries per second = ops/s x {@code entries}.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class TocParseBenchmark {
  @Param({"10000"})
  public int entries;

  @Param({"ESTARGZ", "ZSTD_CHUNKED"})
  public LayerFormat format;

  /**
   * A layer tar to convert instead of the generated one ({@code -p tar=FILE}; {@code entries} is then ignored): a real
   * layer's TOC has longer names and more fields per entry than the generated layer's.
   */
  @Param({""})
  public String tar;

  private Descriptor descriptor;
  private BlobReader reader;

  @Setup(Level.Trial)
  public void build() throws Exception {
    // The digest check is part of the figure: with the JDK's SHA-256 under C1 it was most of it.
    System.out.println(ManagerHashing.install());
    Path dir = Files.createTempDirectory("flatpull-bench");
    Path source = tar.isEmpty() ? generated(dir.resolve("src.tar")) : Path.of(tar);
    InMemoryLayer built = InMemoryLayer.write(
        new LazyLayerWriter(format, LazyLayerWriter.DEFAULT_CHUNK_SIZE, format == LayerFormat.ESTARGZ ? 6 : 3), source,
        List.of());
    descriptor = built.descriptor();
    reader = built.reader();
    try (var walk = Files.walk(dir)) {
      walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  /** A layer of {@code entries} entries: directories of 99 small Python files each. */
  private Path generated(Path tar) throws java.io.IOException {
    try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(tar))) {
      for (int d = 0; d < entries / 100; d++) {
        TarWriter.writeHeader(out, new TarHeader("usr/lib/pkg" + d + "/", TarHeader.DIR, 0, 0755, 0, 0, "", "",
            Instant.EPOCH, "", 0, 0, java.util.Map.of()));
        for (int f = 0; f < 99; f++) {
          byte[] content = ("module " + d + "." + f + "\n").repeat(20).getBytes();
          TarWriter.writeEntry(out, TarHeader.regular("usr/lib/pkg" + d + "/file" + f + ".py", content.length, 0644,
              Instant.EPOCH), content);
        }
      }
      TarWriter.writeEnd(out);
    }
    return tar;
  }

  @Benchmark
  public LayerIndex parse() throws Exception {
    return format.readToc(descriptor, reader, FetchLimits.DEFAULTS);
  }
}
