package dev.flatpull.fetcher.convert;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.LayerTar;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class InMemoryLayerTest {
  @TempDir Path dir;

  @Test
  void eachFormat_hasItsMediaType_andAnIndexOfItsFiles_andLeavesNoFiles() throws IOException {
    byte[] tar = LayerTar.of(Map.of("lib/a", "alpha".getBytes(), "b", new byte[70_000]));
    for (LayerFormat format : List.of(LayerFormat.ESTARGZ, LayerFormat.ZSTD_CHUNKED)) {
      InMemoryLayer layer = InMemoryLayer.write(new LazyLayerWriter(format, 16 << 10, 1), tar, List.of(), dir);

      assertEquals(format == LayerFormat.ESTARGZ ? MediaTypes.OCI_LAYER_GZIP : MediaTypes.OCI_LAYER_ZSTD,
          layer.descriptor().mediaType());
      assertEquals(format, LayerFormat.of(layer.descriptor()));
      assertEquals(Digest.sha256(layer.blob()), layer.descriptor().digest());
      assertEquals(layer.blob().length, layer.descriptor().size());
      LayerIndex index = layer.index(FetchLimits.DEFAULTS);
      assertEquals(5, index.entry("/lib/a").orElseThrow().size());
      assertEquals(70_000, index.entry("/b").orElseThrow().size());
      try (var left = Files.list(dir)) {
        assertEquals(List.of(), left.toList());
      }
    }
  }

  @Test
  void write_tellsHowMuchOfTheSourcesContentIsConverted_upToAllOfIt() throws IOException {
    Path tar = dir.resolve("layer.tar");
    Files.write(tar, LayerTar.of(Map.of("lib/a", "alpha".getBytes(), "b", new byte[70_000], "c", new byte[300])));
    List<long[]> told = new java.util.ArrayList<>();
    new LazyLayerWriter(LayerFormat.ESTARGZ, 16 << 10, 1).write(tar, dir.resolve("out"), List.of("c"),
        (done, total) -> told.add(new long[] {done, total}));
    assertTrue(told.size() >= 3, "after each entry: " + told.size());
    for (int i = 1; i < told.size(); i++) {
      assertTrue(told.get(i)[0] >= told.get(i - 1)[0], "never backwards");
    }
    assertEquals(300, told.get(0)[0], "the prioritized file first");
    long[] last = told.get(told.size() - 1);
    assertEquals(70_305, last[1]);
    assertEquals(last[1], last[0]);
  }

  @Test
  void readingBeyondTheBlob_fails_asARegistrysWould() throws IOException {
    InMemoryLayer layer = InMemoryLayer.estargz(LayerTar.numbered(new byte[] {1}), dir);
    int n = layer.blob().length;

    assertArrayEquals(java.util.Arrays.copyOfRange(layer.blob(), n - 10, n),
        layer.reader().read(ByteRange.between(n - 10, n)));
    IOException e = assertThrows(IOException.class, () -> layer.reader().read(ByteRange.between(n - 10, n + 1)));
    assertTrue(e.getMessage().contains("beyond"), e.getMessage());
  }

  @Test
  void aPlainLayer_hasNoOneMediaType() {
    assertThrows(IllegalStateException.class, LayerFormat.PLAIN::mediaType);
  }
}
