package dev.flatpull.it.bench;

import com.github.luben.zstd.Zstd;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.convert.ConvertedLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.layer.ZstdChunkedToc;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import dev.flatpull.runtimeimage.ImageBinding;
import dev.flatpull.runtimeimage.RuntimeImageBuilder;
import dev.flatpull.runtimeimage.RuntimeImageDecoder;
import dev.flatpull.runtimeimage.RuntimeImageFormat;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.io.BufferedOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;

/**
 * Build and decode throughput of the runtime-image format, each beside its baseline in the same run: building (read
 * the traced chunks of a zstd:chunked layer in memory, verify, deduplicate, pack, compress at the default level)
 * against plain zstd compression of the same content at that level; decoding (decompress every frame, verify every
 * extent against its digest) against plain zstd decompression of the same frames. 32 MiB of content in 512 files of
 * 16 KiB chunks, every page traced. MB/s of content = ops/s x 32.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class RuntimeImageBenchmark {
  private static final int FILES = 512;
  private static final int FILE_SIZE = 64 << 10;

  private ImageManifest manifest;
  private LazyLayer layer;
  private Trace trace;
  private RuntimeImageFormat.Layout layout;
  private byte[] blob;
  private ImageBinding binding;
  private byte[] content;
  private List<byte[]> frames;

  @Setup(Level.Trial)
  public void build() throws Exception {
    Path dir = Files.createTempDirectory("flatpull-bench");
    Path tar = dir.resolve("src.tar");
    Random r = new Random(1);
    List<String> names = new ArrayList<>();
    java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
    try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(tar))) {
      for (int f = 0; f < FILES; f++) {
        byte[] data = new byte[FILE_SIZE];
        r.nextBytes(data);
        // Compressible like code: half of each 64-byte line repeats.
        for (int i = 0; i < data.length; i += 64) {
          Arrays.fill(data, i, i + 32, (byte) (i >> 6));
        }
        String name = "usr/lib/pkg/lib" + f + ".so";
        names.add("/" + name);
        all.writeBytes(data);
        TarWriter.writeHeader(out, TarHeader.regular(name, data.length, 0644, Instant.EPOCH));
        out.write(data);
        TarWriter.pad(out, data.length);
      }
      TarWriter.writeEnd(out);
    }
    content = all.toByteArray();
    ConvertedLayer c = new LazyLayerWriter(LayerFormat.ZSTD_CHUNKED, 16 << 10, 3).write(tar, dir.resolve("out"),
        List.of());
    byte[] layerBlob = Files.readAllBytes(dir.resolve("out"));
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER_ZSTD, c.digest(), c.size(), c.annotations());
    BlobReader reader = range -> Arrays.copyOfRange(layerBlob, (int) range.offset(), (int) range.end());
    LayerIndex index = ZstdChunkedToc.read(d, reader, FetchLimits.DEFAULTS);
    layer = new LazyLayer(index, reader, 64 << 10);
    Descriptor config = new Descriptor(MediaTypes.OCI_CONFIG, Digest.sha256(new byte[] {1}), 1, Map.of());
    manifest = (ImageManifest) OciDocuments.parse(
        OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST, config, List.of(d), Map.of()), null);
    List<PageRun> runs = new ArrayList<>();
    for (int f = 0; f < FILES; f++) {
      runs.add(new PageRun(f, 0, FILE_SIZE / 4096, f, 1));
    }
    trace = new Trace(new ServiceVersion("bench", manifest.digest().toString(), "linux/amd64", List.of(), List.of(),
        "", List.of("exit")), "bench", Instant.EPOCH, List.of(1L), List.of(new LayerTrace(d.digest().toString(),
        names, runs)));
    blob = build(RuntimeImageSettings.DEFAULTS).blob();
    layout = RuntimeImageFormat.read(blob);
    binding = ImageBinding.bind(layout.index(), manifest, Map.of(d.digest(), index));
    frames = new ArrayList<>();
    for (int i = 0; i < layout.index().frames().size(); i++) {
      long at = layout.frameStart(i);
      frames.add(Arrays.copyOfRange(blob, (int) at, (int) at + layout.index().frames().get(i).length()));
    }
    try (var walk = Files.walk(dir)) {
      walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  private RuntimeImageBuilder.Built build(RuntimeImageSettings settings) throws Exception {
    return new RuntimeImageBuilder(settings, InstantSource.system(), "bench", line -> {})
        .build(trace, manifest, x -> layer);
  }

  @Benchmark
  public byte[] buildRuntimeImage() throws Exception {
    return build(RuntimeImageSettings.DEFAULTS).blob();
  }

  /** Baseline of build: zstd alone, the same content in frames of the default size at the default level. */
  @Benchmark
  public long buildBaselineZstdCompress() {
    long n = 0;
    int frame = (int) RuntimeImageSettings.DEFAULTS.frameSize();
    for (int off = 0; off < content.length; off += frame) {
      n += Zstd.compress(Arrays.copyOfRange(content, off, Math.min(content.length, off + frame)),
          RuntimeImageSettings.DEFAULTS.level()).length;
    }
    return n;
  }

  @Benchmark
  public long decodeRuntimeImage() throws Exception {
    return RuntimeImageDecoder.decode(layout, blob, binding, (l, e, c) -> {}).acceptedBytes();
  }

  /** Baseline of decode: zstd alone on the same frames, nothing verified. */
  @Benchmark
  public long decodeBaselineZstdDecompress() {
    long n = 0;
    for (int i = 0; i < frames.size(); i++) {
      n += Zstd.decompress(frames.get(i), layout.index().frames().get(i).size()).length;
    }
    return n;
  }
}
