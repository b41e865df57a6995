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

  private Descriptor descriptor;
  private BlobReader reader;

  @Setup(Level.Trial)
  public void build() throws Exception {
    Path dir = Files.createTempDirectory("flatpull-bench");
    Path tar = dir.resolve("src.tar");
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
    InMemoryLayer built = InMemoryLayer.write(
        new LazyLayerWriter(format, LazyLayerWriter.DEFAULT_CHUNK_SIZE, format == LayerFormat.ESTARGZ ? 6 : 3), tar,
        List.of());
    descriptor = built.descriptor();
    reader = built.reader();
    try (var walk = Files.walk(dir)) {
      walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  @Benchmark
  public LayerIndex parse() throws Exception {
    return format.readToc(descriptor, reader, FetchLimits.DEFAULTS);
  }
}
