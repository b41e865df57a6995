package dev.flatpull.manager;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.pagecache.PageCache;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.InstantSource;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** An image session's runtime image, without a registry that has one: what a session is told when none comes. */
class RuntimeImageLoadingTest {
  @TempDir Path dir;
  private final Lookups metrics = new Lookups();
  private final LayerServer.Threads threads = LayerServer.Threads.create();
  private RegistryClients clients;
  private PageCache cache;

  private static final class Lookups implements RemoteLayerMetrics {
    final List<String> results = new CopyOnWriteArrayList<>();

    @Override
    public void runtimeImageLookup(String result) {
      results.add(result);
    }
  }

  @AfterEach
  void close() throws Exception {
    threads.shutdown();
    if (clients != null) {
      clients.close();
    }
    if (cache != null) {
      cache.close();
    }
  }

  private RuntimeImageLoading loading(String toml) throws Exception {
    FlatpullConfig config = FlatpullConfig.parse("test.toml", toml);
    clients = RegistryClients.create(config, new FetchStatistics());
    cache = PageCache.open(dir.resolve("cache"), config.cache());
    return new RuntimeImageLoading(clients, cache, config.runtimeImage(), metrics, System::nanoTime,
        InstantSource.system(), threads, (session, layer) -> Optional.empty(), () -> false);
  }

  /** A session of an image on a registry nothing listens at (its layers are never opened here). */
  private static ImageSession session() {
    byte[] raw = "{}".getBytes(StandardCharsets.UTF_8);
    Digest digest = Digest.sha256(raw);
    Descriptor config = new Descriptor(MediaTypes.OCI_CONFIG, Digest.sha256(new byte[0]), 0, Map.of(),
        Optional.empty(), Optional.empty());
    ImageManifest manifest = new ImageManifest(MediaTypes.OCI_MANIFEST, digest, raw, config, List.of(), Map.of(),
        Optional.empty(), Optional.empty());
    return new ImageSession(ImageReference.parse("127.0.0.1:1/app@" + digest), manifest, 0, null, Runnable::run,
        new ExpectedLayers(System::nanoTime, RemoteLayerMetrics.NONE));
  }

  @Test
  void start_withLoadingOff_completesTheSessionAtOnce_andCountsDisabled() throws Exception {
    ImageSession s = session();
    loading("[runtime_image]\nload = false\n").start(s);
    assertTrue(s.announced.isDone());
    assertFalse(s.runtimeImage.getNow(true));
    assertEquals(List.of("disabled"), metrics.results);
  }

  /** The lookup fails (nothing listens): the session goes on without a runtime image, and the reason is counted. */
  @Test
  void start_whenTheLookupFails_completesTheSessionWithoutARuntimeImage_andCountsIt() throws Exception {
    ImageSession s = session();
    loading("[registry]\nplain_http = true\nmax_attempts = 1\nconnect_timeout = \"1s\"\n").start(s);
    assertFalse(s.runtimeImage.get(30, TimeUnit.SECONDS));
    assertTrue(s.announced.isDone());
    assertEquals(List.of("lookup_failed"), metrics.results);
  }

  /** A stream that never announces costs the image one stall: after it, reads no longer wait for it. */
  @Test
  void awaitAnnounced_waitsOneStallForTheWholeImage() throws Exception {
    RuntimeImageLoading loading = loading("[runtime_image]\nstall = \"20ms\"\n");
    ImageSession late = session();
    late.found.complete(true);
    loading.awaitAnnounced(late);
    assertTrue(late.announcementLate, "the first read waited the stall out");
    ImageSession announced = session();
    announced.announced.complete(null);
    loading.awaitAnnounced(announced);
    assertFalse(announced.announcementLate);
  }

  /** A lookup still on its way (a slow registry) holds no read back: it goes to the lazy loader at once. */
  @Test
  void awaitAnnounced_whileTheLookupIsOnItsWay_orFoundNone_doesNotWait() throws Exception {
    RuntimeImageLoading loading = loading("[runtime_image]\nstall = \"2s\"\n");
    ImageSession looking = session();
    loading.awaitAnnounced(looking);
    assertFalse(looking.announcementLate, "a read waited for a lookup that had not found a runtime image yet");
    ImageSession none = session();
    none.found.complete(false);
    loading.awaitAnnounced(none);
    assertFalse(none.announcementLate);
  }

  @Test
  void rate_isBytesPerSecondOfStreaming_andNothingWithoutEither() {
    assertEquals(", streamed at 200 MB/s", RuntimeImageLoading.rate(10_000_000, 50_000_000));
    assertEquals("", RuntimeImageLoading.rate(0, 50_000_000));
    assertEquals("", RuntimeImageLoading.rate(10_000_000, 0), "one content: no interval to measure");
  }

  @Test
  void kernelLanding_readsOnlyInsideTheLayersMount() throws Exception {
    java.nio.file.Path mount = java.nio.file.Files.createTempDirectory("flatpull-landing");
    try {
      java.nio.file.Path etc = java.nio.file.Files.createDirectories(mount.resolve("etc"));
      java.nio.file.Files.writeString(etc.resolve("passwd"), "layer's own\n");
      java.nio.file.Files.createSymbolicLink(mount.resolve("out"), java.nio.file.Path.of("/etc"));
      java.nio.file.Files.createSymbolicLink(mount.resolve("shadow"), java.nio.file.Path.of("/etc/shadow"));
      assertEquals(java.util.Optional.of(mount.toRealPath().resolve("etc/passwd")),
          RuntimeImageLoading.landingPath(mount, "/etc/passwd"));
      assertEquals(java.util.Optional.of(mount.toRealPath().resolve("etc/passwd")),
          RuntimeImageLoading.landingPath(mount, "//etc/passwd"), "an absolute path is the layer's, never the host's");
      for (String hostile : java.util.List.of("../../etc/passwd", "etc/../../../etc/passwd", "out/passwd", "shadow",
          "", "/", "etc/missing")) {
        assertEquals(java.util.Optional.empty(), RuntimeImageLoading.landingPath(mount, hostile), hostile);
      }
    } finally {
      try (var walk = java.nio.file.Files.walk(mount)) {
        walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }
}
