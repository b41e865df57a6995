package dev.flatpull.manager;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClients;
import java.nio.file.Path;
import dev.flatpull.fetcher.layer.EstargzTail;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ExpectedLayersTest {
  private final AtomicLong now = new AtomicLong(1_000);
  private final List<String> results = new ArrayList<>();
  private final ExpectedLayers expected = new ExpectedLayers(now::get, new RemoteLayerMetrics() {
    @Override
    public void tocExpected(String result) {
      results.add(result);
    }
  });
  private final AtomicInteger opened = new AtomicInteger();

  private static Descriptor described(int layer, long size, int toc) {
    return new EstargzTail(100, size).descriptor(digest(layer), digest(toc));
  }

  private static Descriptor manifests(int layer, long size, int toc) {
    return new Descriptor(MediaTypes.OCI_LAYER_GZIP, digest(layer), size,
        Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, digest(toc).toString()));
  }

  private static Digest digest(int n) {
    return Digest.sha256(new byte[] {(byte) n});
  }

  private CompletableFuture<LazyLayer> opening() {
    opened.incrementAndGet();
    return new CompletableFuture<>();
  }

  @Test
  void theManifestsAgreeingDescriptor_takesTheOpening_once() {
    assertTrue(expected.expect(described(1, 5000, 2), this::opening));
    assertFalse(expected.expect(described(1, 5000, 2), this::opening), "one opening per layer");
    assertEquals(1, opened.get());
    Optional<CompletableFuture<LazyLayer>> claimed = expected.claim(manifests(1, 5000, 2));
    assertTrue(claimed.isPresent());
    assertEquals(Optional.empty(), expected.claim(manifests(1, 5000, 2)), "taken out");
    assertEquals(List.of("used"), results);
    assertEquals(0, expected.size());
  }

  @Test
  void aManifestThatDescribesTheLayerOtherwise_getsNothing() {
    expected.expect(described(1, 5000, 2), this::opening);
    assertEquals(Optional.empty(), expected.claim(manifests(1, 5001, 2)), "another size");
    expected.expect(described(1, 5000, 2), this::opening);
    assertEquals(Optional.empty(), expected.claim(manifests(1, 5000, 3)), "another TOC");
    expected.expect(described(1, 5000, 2), this::opening);
    assertEquals(Optional.empty(), expected.claim(new Descriptor(MediaTypes.OCI_LAYER_GZIP, digest(1), 5000,
        Map.of())), "no TOC digest: the layer is not read lazily at all");
    assertEquals(List.of("differs", "differs", "differs"), results);
    assertEquals(Optional.empty(), expected.claim(manifests(9, 5000, 2)), "never expected");
    assertEquals(3, results.size(), "a layer never expected is not counted");
  }

  @Test
  void anOpeningNobodyClaims_isDroppedAfterAMinute() {
    expected.expect(described(1, 5000, 2), this::opening);
    now.addAndGet(ExpectedLayers.KEPT.toNanos());
    assertEquals(Optional.empty(), expected.claim(manifests(1, 5000, 2)), "too late");
    expected.expect(described(3, 5000, 2), this::opening);
    now.addAndGet(ExpectedLayers.KEPT.toNanos());
    expected.expect(described(4, 5000, 2), this::opening);
    assertEquals(1, expected.size(), "the unclaimed one went when the next came");
    assertEquals(List.of("expired", "expired"), results);
  }

  @Test
  void anExpectedOpeningThatFailed_isNotTheLayersLastWord_itsSessionOpensItAgain(@TempDir Path dir) throws Exception {
    FlatpullConfig config = FlatpullConfig.parse("test.toml",
        "[registry]\nplain_http = true\nmax_attempts = 1\nconnect_timeout = \"1s\"\n");
    // A registry nothing listens at: the session's own opening fails too, but with its own failure.
    ImageReference ref = ImageReference.parse("127.0.0.1:1/app:1");
    try (RegistryClients clients = RegistryClients.create(config, new FetchStatistics())) {
      LayerOpener opener = new LayerOpener(clients.client(ref), config, dir.resolve("layers"));
      CompletableFuture<LazyLayer> early = new CompletableFuture<>();
      early.completeExceptionally(new java.io.IOException("the early fetch was reset"));
      expected.expect(described(1, 5000, 2), () -> early);
      ImageManifest manifest = new ImageManifest(MediaTypes.OCI_MANIFEST, digest(7), "{}".getBytes(),
          new Descriptor(MediaTypes.OCI_CONFIG, digest(8), 0, Map.of()), List.of(manifests(1, 5000, 2)), Map.of(),
          Optional.empty(), Optional.empty());
      ImageSession session = new ImageSession(ref.withDigest(digest(7)), manifest, 0, opener, Runnable::run,
          expected);
      java.io.IOException e = assertThrows(java.io.IOException.class, () -> session.layer(manifests(1, 5000, 2)));
      assertFalse(e.getMessage().contains("reset"), "opened again: " + e.getMessage());
      assertEquals(List.of("used"), results);
    }
  }

  @Test
  void tooManyAtOnce_areNotStarted() {
    for (int i = 0; i < ExpectedLayers.MAX; i++) {
      assertTrue(expected.expect(described(i, 5000, 200), this::opening));
    }
    assertFalse(expected.expect(described(ExpectedLayers.MAX, 5000, 200), this::opening));
    assertEquals(ExpectedLayers.MAX, opened.get());
    assertTrue(expected.claim(manifests(0, 5000, 200)).isPresent());
    assertTrue(expected.expect(described(ExpectedLayers.MAX, 5000, 200), this::opening), "room again");
  }
}
