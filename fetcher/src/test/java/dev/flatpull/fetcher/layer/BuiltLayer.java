package dev.flatpull.fetcher.layer;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.ByteRange;
import dev.flatpull.fetcher.convert.ConvertedLayer;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.oci.Descriptor;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The tests' in-memory lazy layer: a tar written by {@link LazyLayerWriter} and held in memory, with a blob reader
 * that counts what it serves. Every module's tests make their layers here.
 */
public final class BuiltLayer {
  public final byte[] blob;
  public final Descriptor descriptor;
  public final ConvertedLayer converted;
  public final LayerFormat format;
  /** Ranges read through {@link #reader()}, and their bytes. */
  public final AtomicInteger requests = new AtomicInteger();
  public final AtomicLong bytesServed = new AtomicLong();

  private BuiltLayer(InMemoryLayer layer) {
    this.blob = layer.blob();
    this.descriptor = layer.descriptor();
    this.converted = layer.converted();
    this.format = converted.format();
  }

  /** {@code tar} in {@code format} with {@code chunkSize} chunks, {@code prioritized} first, through {@code dir}. */
  public static BuiltLayer write(byte[] tar, LayerFormat format, long chunkSize, List<String> prioritized, Path dir)
      throws IOException {
    LazyLayerWriter writer = new LazyLayerWriter(format, chunkSize, format == LayerFormat.ESTARGZ ? 6 : 3);
    return new BuiltLayer(InMemoryLayer.write(writer, tar, prioritized, dir));
  }

  /** {@code tar} as eStargz with the default chunk size. */
  public static BuiltLayer estargz(byte[] tar, Path dir) throws IOException {
    return new BuiltLayer(InMemoryLayer.estargz(tar, dir));
  }

  public BlobReader reader() {
    return reader(blob);
  }

  /** A counting reader of {@code bytes} in place of the blob (a damaged or altered copy of it). */
  public BlobReader reader(byte[] bytes) {
    return range -> {
      requests.incrementAndGet();
      bytesServed.addAndGet(range.length());
      if (range.end() > bytes.length) {
        throw new IOException("range " + range + " beyond blob of " + bytes.length);
      }
      return java.util.Arrays.copyOfRange(bytes, (int) range.offset(), (int) range.end());
    };
  }

  public LayerIndex index(FetchLimits limits) throws IOException {
    return index(reader(), limits);
  }

  public LayerIndex index(BlobReader r, FetchLimits limits) throws IOException {
    return format.readToc(descriptor, r, limits);
  }

  /** The layer read lazily through the counting reader, chunks up to {@code coalesceGap} apart in one request. */
  public LazyLayer lazy(long coalesceGap) throws IOException {
    BlobReader r = reader();
    return new LazyLayer(index(r, FetchLimits.DEFAULTS), r, coalesceGap);
  }

  static ByteRange range(long from, long to) {
    return ByteRange.between(from, to);
  }
}
