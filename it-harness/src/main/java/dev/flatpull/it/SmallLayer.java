package dev.flatpull.it;

import dev.flatpull.fetcher.convert.ConvertedLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.List;

/**
 * An eStargz layer of regular files {@code f0}, {@code f1}, ... made in memory (its tar and blob written under a
 * directory), for FUSE tests and benchmarks that need no registry.
 *
 * @param blob the layer blob's bytes
 * @param descriptor its descriptor, with the TOC digest annotation
 */
public record SmallLayer(byte[] blob, Descriptor descriptor) {
  /** The layer whose file {@code f<i>} holds {@code contents[i]}, made under {@code dir}. */
  public static SmallLayer of(Path dir, byte[]... contents) throws IOException {
    int[] modes = new int[contents.length];
    java.util.Arrays.fill(modes, 0644);
    return of(dir, modes, contents);
  }

  /** The same, file {@code f<i>} with permission bits {@code modes[i]} (owned by root). */
  public static SmallLayer of(Path dir, int[] modes, byte[]... contents) throws IOException {
    ByteArrayOutputStream tar = new ByteArrayOutputStream();
    for (int i = 0; i < contents.length; i++) {
      TarWriter.writeHeader(tar, TarHeader.regular("f" + i, contents[i].length, modes[i], Instant.EPOCH));
      tar.write(contents[i]);
      TarWriter.pad(tar, contents[i].length);
    }
    TarWriter.writeEnd(tar);
    Files.write(dir.resolve("layer.tar"), tar.toByteArray());
    ConvertedLayer c = new LazyLayerWriter(LayerFormat.ESTARGZ, LazyLayerWriter.DEFAULT_CHUNK_SIZE, 6)
        .write(dir.resolve("layer.tar"), dir.resolve("layer.blob"), List.of());
    return new SmallLayer(Files.readAllBytes(dir.resolve("layer.blob")),
        new Descriptor(MediaTypes.OCI_LAYER_GZIP, c.digest(), c.size(), c.annotations()));
  }
}
