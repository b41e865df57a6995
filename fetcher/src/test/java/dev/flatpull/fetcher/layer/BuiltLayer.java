package dev.flatpull.fetcher.layer;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.ByteRange;
import dev.flatpull.fetcher.convert.ConvertedLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/** A layer written by {@link LazyLayerWriter} and held in memory, with a blob reader that counts what it serves. */
final class BuiltLayer {
  final byte[] blob;
  final Descriptor descriptor;
  final ConvertedLayer converted;
  final LayerFormat format;
  final AtomicInteger requests = new AtomicInteger();
  final AtomicLong bytesServed = new AtomicLong();

  private BuiltLayer(byte[] blob, Descriptor descriptor, ConvertedLayer converted, LayerFormat format) {
    this.blob = blob;
    this.descriptor = descriptor;
    this.converted = converted;
    this.format = format;
  }

  static BuiltLayer write(byte[] tar, LayerFormat format, long chunkSize, List<String> prioritized, Path dir)
      throws IOException {
    Path src = Files.createTempFile(dir, "src", ".tar");
    Path out = Files.createTempFile(dir, "out", ".blob");
    Files.write(src, tar);
    ConvertedLayer c = new LazyLayerWriter(format, chunkSize, format == LayerFormat.ESTARGZ ? 6 : 3)
        .write(src, out, prioritized);
    String mediaType = format == LayerFormat.ESTARGZ ? MediaTypes.OCI_LAYER_GZIP : MediaTypes.OCI_LAYER_ZSTD;
    return new BuiltLayer(Files.readAllBytes(out), new Descriptor(mediaType, c.digest(), c.size(), c.annotations()), c, format);
  }

  BlobReader reader() {
    return reader(blob);
  }

  BlobReader reader(byte[] bytes) {
    return range -> {
      requests.incrementAndGet();
      bytesServed.addAndGet(range.length());
      if (range.end() > bytes.length) {
        throw new IOException("range " + range + " beyond blob of " + bytes.length);
      }
      return java.util.Arrays.copyOfRange(bytes, (int) range.offset(), (int) range.end());
    };
  }

  LayerIndex index(FetchLimits limits) throws IOException {
    return index(reader(), limits);
  }

  LayerIndex index(BlobReader r, FetchLimits limits) throws IOException {
    return format == LayerFormat.ESTARGZ ? EstargzToc.read(descriptor, r, limits) : ZstdChunkedToc.read(descriptor, r, limits);
  }

  static ByteRange range(long from, long to) {
    return ByteRange.between(from, to);
  }
}
