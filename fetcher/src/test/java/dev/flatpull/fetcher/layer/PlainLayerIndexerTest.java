package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.github.luben.zstd.ZstdOutputStream;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.zip.GZIPOutputStream;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Plain layers of every compression are indexed locally and read with the same verification as lazy ones. */
class PlainLayerIndexerTest {
  @TempDir Path dir;

  private byte[] compress(String mediaType, byte[] tar) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (OutputStream c = switch (mediaType) {
          case MediaTypes.OCI_LAYER_GZIP -> new GZIPOutputStream(out);
          case MediaTypes.OCI_LAYER_ZSTD -> new ZstdOutputStream(out);
          default -> out;
        }) {
      c.write(tar);
    }
    return out.toByteArray();
  }

  @ParameterizedTest
  @ValueSource(strings = {MediaTypes.OCI_LAYER, MediaTypes.OCI_LAYER_GZIP, MediaTypes.OCI_LAYER_ZSTD})
  void open_anyCompression_readsEveryFile(String mediaType) throws Exception {
    SampleTar tar = new SampleTar(9, 700_000);
    byte[] blob = compress(mediaType, tar.bytes);
    Path blobFile = dir.resolve("blob");
    Files.write(blobFile, blob);
    Descriptor d = new Descriptor(mediaType, Digest.sha256(blob), blob.length, Map.of());
    LazyLayer layer = PlainLayerIndexer.open(d, blobFile, dir.resolve("layer.tar"), FetchLimits.DEFAULTS);
    assertEquals(LayerFormat.PLAIN, layer.index().format());
    for (SampleTar.Item item : tar.items) {
      LayerEntry e = layer.index().entry(item.name()).orElseThrow();
      assertEquals(item.type(), e.type(), item.name());
      if (item.type() == EntryType.REG) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        layer.copyTo(e, out);
        assertArrayEquals(item.content(), out.toByteArray(), item.name());
      }
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {MediaTypes.OCI_LAYER_GZIP, MediaTypes.OCI_LAYER_ZSTD})
  void open_layerDecompressingBeyondTheLimit_isRefusedAsABomb(String mediaType) throws Exception {
    byte[] blob = compress(mediaType, new byte[8 << 20]);
    Path blobFile = dir.resolve("bomb");
    Files.write(blobFile, blob);
    Descriptor d = new Descriptor(mediaType, Digest.sha256(blob), blob.length, Map.of());
    FetchLimits small = new FetchLimits(1 << 20, 1 << 20, 100, 1 << 20, 1 << 20);
    assertThrows(SizeLimitExceededException.class, () -> PlainLayerIndexer.open(d, blobFile, dir.resolve("bomb.tar"), small));
    assertEquals(false, Files.exists(dir.resolve("bomb.tar")), "no partial tar is left to be mistaken for a good one");
  }
}
