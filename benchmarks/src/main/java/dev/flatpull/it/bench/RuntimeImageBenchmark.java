package dev.flatpull.it.bench;

import com.github.luben.zstd.Zstd;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.runtimeimage.ImageBinding;
import dev.flatpull.runtimeimage.RuntimeImageDecoder;
import dev.flatpull.runtimeimage.RuntimeImageFormat;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
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

  private SyntheticImage image;
  private RuntimeImageFormat.Layout layout;
  private byte[] blob;
  private ImageBinding binding;
  private byte[] content;
  private List<byte[]> frames;

  @Setup(Level.Trial)
  public void build() throws Exception {
    Path dir = Files.createTempDirectory("flatpull-bench");
    SyntheticImage image = SyntheticImage.generate(dir, FILES, FILE_SIZE, 16 << 10, 1);
    Files.delete(dir);
    this.image = image;
    content = image.content();
    blob = image.runtimeImage(RuntimeImageSettings.DEFAULTS).blob();
    layout = RuntimeImageFormat.read(blob);
    binding = ImageBinding.bind(layout.index(), image.manifest(), Map.of(image.layerDescriptor().digest(),
        image.index()));
    frames = layout.frames(blob);
  }

  @Benchmark
  public byte[] buildRuntimeImage() throws Exception {
    return image.runtimeImage(RuntimeImageSettings.DEFAULTS).blob();
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
