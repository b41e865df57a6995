package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FakeRegistry;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.Referrers;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.nio.file.Path;
import java.time.InstantSource;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Publishing runtime images against a registry at the HTTP seam: the referrers API (which no registry installable here
 * serves) and the tag schema that distribution 2.8 needs. {@code RuntimeImageIT} does the tag schema against the real
 * registry.
 */
class RuntimeImagePublisherTest {
  @TempDir Path dir;
  private FakeRegistry registry;
  private RegistryClients clients;

  @AfterEach
  void stop() {
    if (clients != null) {
      clients.close();
    }
    if (registry != null) {
      registry.close();
    }
  }

  private RuntimeImagePublisher publisher(FakeRegistry registry) throws Exception {
    this.registry = registry.start();
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE, Sleeper.SYSTEM,
        InstantSource.system());
    RegistryClient client = clients.client(ImageReference.parse(registry.address() + "/team/app:v1"));
    return RuntimeImagePublisher.of(client);
  }

  record Fixture(TestImage image, Descriptor subject) {
    RuntimeImageBuilder.Built build(List<String> command) throws Exception {
      return builtAt(this, command, "2026-12-01T00:00:00Z");
    }
  }

  private Fixture fixture() throws Exception {
    TestImage img = new RuntimeImageBuilderTest().imageIn(dir, LayerFormat.ESTARGZ);
    return new Fixture(img, new Descriptor(MediaTypes.OCI_MANIFEST, img.manifest.digest(), img.manifest.raw().length,
        Map.of()));
  }

  private static RuntimeImagePublisher.Published push(RuntimeImagePublisher p, RuntimeImageBuilder.Built b,
      Descriptor subject) throws Exception {
    return p.push(b.index(), b.blob(), subject);
  }

  @Test
  void withoutTheReferrersApi_theTagSchemaListsIt_serviceVersionsCoexist_andAgainReplaces() throws Exception {
    FakeRegistry registry = new FakeRegistry(false);
    RuntimeImagePublisher p = publisher(registry);
    Fixture f = fixture();
    RuntimeImageBuilder.Built a = f.build(List.of("a"));
    RuntimeImageBuilder.Built b = f.build(List.of("b"));
    RuntimeImagePublisher.Published pa = push(p, a, f.subject());
    assertEquals(Referrers.Source.TAG_SCHEMA, pa.source());
    assertTrue(registry.content.manifest(Referrers.tagOf(f.subject().digest())).isPresent(), "the tag schema index exists");
    push(p, b, f.subject());
    List<RuntimeImageArtifact> listed = p.list(f.subject().digest());
    assertEquals(2, listed.size(), listed.toString());
    assertEquals(java.util.Set.of(List.of("a"), List.of("b")),
        listed.stream().map(RuntimeImageArtifact::command).collect(java.util.stream.Collectors.toSet()));
    RuntimeImageArtifact first = listed.stream().filter(r -> r.command().equals(List.of("a"))).findFirst().orElseThrow();
    assertEquals(a.index().service().key(), first.serviceKey());
    assertEquals(a.blob().length, first.size());
    assertEquals(a.index().trace().pages(), first.pages());
    assertArrayEquals(a.blob(), p.fetch(first, f.subject().digest(), dir.resolve("work")));
    var artifact = (dev.flatpull.fetcher.oci.ImageManifest) OciDocuments.parse(
        registry.content.manifest(first.digest().toString()).orElseThrow(), MediaTypes.OCI_MANIFEST);
    assertEquals(Long.toString(RuntimeImageFormat.readIndex(a.blob()).dataStart()),
        artifact.layers().get(0).annotations().get(RuntimeImageArtifact.INDEX_END), "where the index ends");

    // The same service version built again (another creation time, so another manifest) replaces the first.
    RuntimeImagePublisher.Published replaced = push(p, rebuiltLater(f, List.of("a")), f.subject());
    assertEquals(1, replaced.replaced().size(), replaced.toString());
    assertEquals(first.digest(), replaced.replaced().get(0).digest());
    assertEquals(2, p.list(f.subject().digest()).size());
    assertFalse(registry.content.manifest(first.digest().toString()).isPresent(), "the replaced manifest was deleted");

    List<RuntimeImageArtifact> removed = p.remove(f.subject().digest(), r -> r.command().equals(List.of("b")));
    assertEquals(1, removed.size());
    assertEquals(List.of(List.of("a")), p.list(f.subject().digest()).stream().map(RuntimeImageArtifact::command).toList());
  }

  /** A later build of the same service version: another creation time, so another artifact manifest. */
  private static RuntimeImageBuilder.Built rebuiltLater(Fixture f, List<String> command) throws Exception {
    return builtAt(f, command, "2026-12-05T00:00:00Z");
  }

  /** The fixture's trace as the service version running {@code command}, built at {@code instant}. */
  private static RuntimeImageBuilder.Built builtAt(Fixture f, List<String> command, String instant) throws Exception {
    Trace t = RuntimeImageBuilderTest.trace(f.image());
    ServiceVersion s = t.service();
    Trace other = new Trace(new ServiceVersion(s.image(), s.manifestDigest(), s.platform(), command, s.environment(),
        s.workingDirectory(), s.probes()), t.flatpullVersion(), t.recordedAt(), t.readyMillis(), t.layers());
    return new RuntimeImageBuilder(dev.flatpull.config.RuntimeImageSettings.DEFAULTS.withFrameSize(64 * 1024),
        InstantSource.fixed(java.time.Instant.parse(instant)), "test", l -> {})
        .build(other, f.image().manifest, f.image().source());
  }

  @Test
  void withTheReferrersApi_itIsUsed_andNoTagIsWritten() throws Exception {
    FakeRegistry registry = new FakeRegistry(true);
    RuntimeImagePublisher p = publisher(registry);
    Fixture f = fixture();
    RuntimeImagePublisher.Published pa = push(p, f.build(List.of("a")), f.subject());
    assertEquals(Referrers.Source.API, pa.source());
    push(p, f.build(List.of("b")), f.subject());
    assertEquals(0, registry.tagWrites.get(), "a registry with the API needs no tag-schema index");
    assertEquals(2, p.list(f.subject().digest()).size());
    RuntimeImagePublisher.Published again = push(p, rebuiltLater(f, List.of("a")), f.subject());
    assertEquals(1, again.replaced().size());
    assertEquals(2, p.list(f.subject().digest()).size(), "replaced through the API by deleting the old manifest");
  }

  /** A cold start's lookup asks the referrers API and the tag schema at once; the answer is the same as asked in turn. */
  @Test
  void listAtOnce_asksTheTagWhileTheApiAnswers_andFindsWhatListFinds() throws Exception {
    for (boolean api : new boolean[] {false, true}) {
      FakeRegistry registry = new FakeRegistry(api);
      RuntimeImagePublisher p = publisher(registry);
      Fixture f = fixture();
      push(p, f.build(List.of("a")), f.subject());
      push(p, rebuiltLater(f, List.of("b")), f.subject());
      List<RuntimeImageArtifact> inTurn = p.list(f.subject().digest());
      registry.apiAwaitsTagRead = new java.util.concurrent.CountDownLatch(1);
      java.util.concurrent.ExecutorService executor = java.util.concurrent.Executors.newCachedThreadPool();
      try {
        List<RuntimeImageArtifact> atOnce = p.list(f.subject().digest(), executor);
        assertEquals(inTurn.stream().map(RuntimeImageArtifact::digest).toList(),
            atOnce.stream().map(RuntimeImageArtifact::digest).toList(), "api " + api);
        assertEquals(2, atOnce.size());
        // The API's answer waited for the tag read, which arrived meanwhile: asked in turn, it would not have.
        assertEquals(0, registry.apiAwaitsTagRead.getCount(), "the tag was read (api " + api + ")");
        assertEquals(0, registry.apiWaitedInVain.get(), "asked at once, not one after the other (api " + api + ")");
      } finally {
        executor.shutdownNow();
        stop();
      }
    }
  }

  @Test
  void concurrentPushesOfTwoServiceVersions_toTheTagSchema_bothSurvive() throws Exception {
    FakeRegistry registry = new FakeRegistry(false);
    RuntimeImagePublisher p = publisher(registry);
    Fixture f = fixture();
    List<RuntimeImageBuilder.Built> builds = List.of(f.build(List.of("a")), f.build(List.of("b")),
        f.build(List.of("c")));
    // Every writer reads the index before any other has written it.
    registry.tagReadsMeet = new java.util.concurrent.CountDownLatch(builds.size());
    ExecutorService pool = Executors.newFixedThreadPool(3);
    try {
      List<Future<RuntimeImagePublisher.Published>> done = builds.stream()
          .map(b -> pool.submit(() -> push(p, b, f.subject()))).toList();
      for (Future<RuntimeImagePublisher.Published> d : done) {
        d.get();
      }
    } finally {
      pool.shutdownNow();
    }
    List<RuntimeImageArtifact> listed = p.list(f.subject().digest());
    assertEquals(3, listed.size(), "every concurrent push survived: " + listed);
    assertTrue(registry.tagWrites.get() > 3, "the race happened (" + registry.tagWrites.get() + " index writes)");
  }

  @Test
  void anArtifactWhoseSubjectIsAnotherManifest_isRefusedWhenFetched() throws Exception {
    FakeRegistry registry = new FakeRegistry(false);
    RuntimeImagePublisher p = publisher(registry);
    Fixture f = fixture();
    RuntimeImageBuilder.Built a = f.build(List.of("a"));
    push(p, a, f.subject());
    RuntimeImageArtifact listed = p.list(f.subject().digest()).get(0);
    // Someone lists, under this image, a runtime image artifact whose subject is another manifest.
    Descriptor blob = new Descriptor(RuntimeImageArtifact.BLOB_MEDIA_TYPE, Digest.sha256(a.blob()), a.blob().length,
        Map.of());
    Descriptor other = new Descriptor(MediaTypes.OCI_MANIFEST, Digest.sha256(new byte[] {1}), 1, Map.of());
    byte[] foreign = OciDocuments.writeArtifactManifest(RuntimeImageArtifact.ARTIFACT_TYPE, List.of(blob), other,
        listed.manifest().annotations());
    registry.content.putManifest(null, MediaTypes.OCI_MANIFEST, foreign);
    RuntimeImageArtifact forged = RuntimeImageArtifact.of(new Descriptor(MediaTypes.OCI_MANIFEST,
        Digest.sha256(foreign), foreign.length, listed.manifest().annotations()));
    String m = assertThrows(RuntimeImageMismatchException.class,
        () -> p.fetch(forged, f.subject().digest(), dir.resolve("w"))).getMessage();
    assertTrue(m.contains("its subject is " + other.digest() + ", not the image manifest"), m);
  }
}
