package dev.flatpull.fetcher.convert;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.Descriptor;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

/**
 * A layer written in a lazy format and held in memory: what the warm-up serves from its loopback registry, and what
 * tests and benchmarks read without a registry. Only for small layers: the blob is one array.
 *
 * @param converted what the writer says of it ({@link ConvertedLayer#blob()} names a file no longer there)
 * @param blob the layer blob's bytes
 */
public record InMemoryLayer(ConvertedLayer converted, byte[] blob) {
  /** {@code tar} written by {@code writer}, {@code prioritized} first; the blob's file beside the tar is removed. */
  public static InMemoryLayer write(LazyLayerWriter writer, Path tar, List<String> prioritized) throws IOException {
    Path out = Files.createTempFile(tar.toAbsolutePath().getParent(), "layer", ".blob");
    try {
      ConvertedLayer c = writer.write(tar, out, prioritized);
      return new InMemoryLayer(c, Files.readAllBytes(out));
    } finally {
      Files.deleteIfExists(out);
    }
  }

  /** The tar {@code tar} written by {@code writer}, through files in {@code scratch} that are removed. */
  public static InMemoryLayer write(LazyLayerWriter writer, byte[] tar, List<String> prioritized, Path scratch)
      throws IOException {
    Path in = Files.createTempFile(scratch, "layer", ".tar");
    try {
      Files.write(in, tar);
      return write(writer, in, prioritized);
    } finally {
      Files.deleteIfExists(in);
    }
  }

  /** {@code tar} as eStargz with the default chunk size, through files in {@code scratch} that are removed. */
  public static InMemoryLayer estargz(byte[] tar, Path scratch) throws IOException {
    return write(new LazyLayerWriter(LayerFormat.ESTARGZ, LazyLayerWriter.DEFAULT_CHUNK_SIZE, 6), tar, List.of(),
        scratch);
  }

  public Descriptor descriptor() {
    return converted.descriptor();
  }

  /** Reads ranges of the blob; a range beyond its end fails as a registry's would. */
  public BlobReader reader() {
    return range -> {
      if (range.end() > blob.length) {
        throw new IOException("range " + range + " beyond the blob's " + blob.length + " bytes");
      }
      return Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
    };
  }

  /** The layer's index, read from its TOC (verified as any layer's). */
  public LayerIndex index(FetchLimits limits) throws IOException {
    return converted.format().readToc(descriptor(), reader(), limits);
  }
}
