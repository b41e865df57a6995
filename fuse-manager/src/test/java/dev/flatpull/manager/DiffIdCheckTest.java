package dev.flatpull.manager;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.core.VerifiedContent;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.BuiltLayer;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.pagecache.PageCache;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The diff_id check once a layer is local: a layer converted by flatpull (zstd:chunked, with a tar-split), its chunks
 * in a real page cache, against an image config that gives the right diff_id, a wrong one, or none to rebuild from.
 */
class DiffIdCheckTest {
  @TempDir Path dir;
  private PageCache cache;
  private final List<String> results = new ArrayList<>();
  private final RemoteLayerMetrics metrics = new RemoteLayerMetrics() {
    @Override
    public void diffIdChecked(String result) {
      results.add(result);
    }
  };

  @AfterEach
  void close() throws Exception {
    if (cache != null) {
      cache.close();
    }
  }

  /** A layer in memory: its index, read from its own bytes, and what the converter says its diff_id is. */
  private record Layer(LayerIndex index, LazyLayer lazy, Descriptor descriptor, Digest diffId) {}

  private Layer layer(LayerFormat format) throws Exception {
    LayerTar tar = new LayerTar();
    Random r = new Random(5);
    for (int i = 0; i < 20; i++) {
      byte[] content = new byte[1000 + r.nextInt(200_000)];
      r.nextBytes(content);
      if (i % 5 == 0) {
        content = new byte[150_000];
      }
      tar.entry(TarHeader.regular("f" + i, content.length, 0644, Instant.parse("2024-01-01T00:00:00Z")), content);
    }
    BuiltLayer built = BuiltLayer.write(tar.bytes(), format, 64 << 10, List.of(), dir);
    BlobReader reader = built.reader();
    LayerIndex index = built.index(reader, FetchLimits.DEFAULTS);
    return new Layer(index, new LazyLayer(index, reader, 0), built.descriptor, built.converted.diffId());
  }

  /** Every chunk of the layer fetched into the page cache, as a finished background fetch leaves it. */
  private void cacheWhole(Layer l) throws Exception {
    cache = PageCache.open(dir.resolve("cache"), new CacheSettings(Optional.empty(), 64 << 20, 1L << 30,
        Duration.ofSeconds(5)));
    List<LayerChunk> all = new ArrayList<>();
    for (LayerEntry e : l.index().entries()) {
      if (e.type() == EntryType.REG) {
        all.addAll(e.chunks().stream().filter(c -> !c.stored().isEmpty()).toList());
      }
    }
    for (Map.Entry<LayerChunk, VerifiedContent> got : l.lazy().fetchChunks(all).entrySet()) {
      cache.put(got.getKey().digest(), got.getValue().bytes());
    }
  }

  private static ImageManifest manifest(Descriptor layer, byte[] config) {
    Descriptor c = new Descriptor(MediaTypes.OCI_CONFIG, Digest.sha256(config), config.length, Map.of());
    return new ImageManifest(MediaTypes.OCI_MANIFEST, Digest.sha256(new byte[] {1}), new byte[0], c, List.of(layer),
        Map.of(), Optional.empty(), Optional.empty());
  }

  private static byte[] config(Digest diffId) {
    return ("{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" + diffId + "\"]}}").getBytes(StandardCharsets.UTF_8);
  }

  private void check(Layer l, byte[] config) {
    new DiffIdCheck(l.index(), Optional.of(manifest(l.descriptor(), config)), cache, d -> config, metrics).run();
  }

  @Test
  void aLayerRebuiltFromItsTarSplitAndTheCache_matchesTheConfigsDiffId() throws Exception {
    Layer l = layer(LayerFormat.ZSTD_CHUNKED);
    cacheWhole(l);
    check(l, config(l.diffId()));
    assertEquals(List.of("match"), results);
  }

  @Test
  void aConfigNamingAnotherTarStream_isAMismatch() throws Exception {
    Layer l = layer(LayerFormat.ZSTD_CHUNKED);
    cacheWhole(l);
    check(l, config(Digest.sha256(new byte[] {9})));
    assertEquals(List.of("mismatch"), results);
  }

  @Test
  void aLayerWithoutATarSplit_isUnverifiable() throws Exception {
    Layer l = layer(LayerFormat.ESTARGZ);
    cacheWhole(l);
    check(l, config(l.diffId()));
    assertEquals(List.of("unverifiable"), results);
  }

  @Test
  void aChunkThatLeftTheCache_failsTheCheck_withoutAFetch() throws Exception {
    Layer l = layer(LayerFormat.ZSTD_CHUNKED);
    cache = PageCache.open(dir.resolve("empty"), new CacheSettings(Optional.empty(), 64 << 20, 1L << 30,
        Duration.ofSeconds(5)));
    check(l, config(l.diffId()));
    assertEquals(List.of("failed"), results);
  }
}
