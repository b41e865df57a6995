package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.config.RuntimeImageSettings.Limits;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Await;
import dev.flatpull.core.Digest;
import dev.flatpull.core.VerifiedContent;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FakeRegistry;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.pagecache.ProducerProgress;
import dev.flatpull.runtimeimage.HostileRuntimeImages.Hostile;
import dev.flatpull.runtimeimage.RuntimeImageDecoder.RejectionKind;
import dev.flatpull.runtimeimage.RuntimeImageFormat.Layout;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import java.nio.file.Path;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Streaming a runtime image into the page cache, against a registry at the HTTP seam (ranges, truncation, flipped
 * bytes, a held-back response) and a real page cache on disk. The cold-start integration test does the same through
 * containerd and FUSE.
 */
class RuntimeImageStreamTest {
  @TempDir Path dir;
  RegistryClients clients;
  FakeRegistry registry;
  RegistryClient client;
  TestImage image;
  Map<Digest, LayerIndex> tocs;
  RuntimeImageBuilder.Built built;
  RuntimeImageArtifact artifact;
  private final List<PageCache> caches = new ArrayList<>();

  @BeforeEach
  void publish() throws Exception {
    registry = new FakeRegistry(false).start();
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true)
        .withBackoff(Duration.ofMillis(1), Duration.ofMillis(2)));
    clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE, Sleeper.SYSTEM,
        InstantSource.system());
    client = clients.client(ImageReference.parse(registry.address() + "/team/app:v1"));
    image = new RuntimeImageBuilderTest().imageIn(dir, LayerFormat.ESTARGZ);
    tocs = image.indexes();
    built = RuntimeImageBuilderTest.builder(dev.flatpull.config.RuntimeImageSettings.Verification.IMAGE)
        .build(RuntimeImageBuilderTest.trace(image), image.manifest, image.source());
    assertTrue(built.index().frames().size() >= 2, "the fixture spans several frames");
    Descriptor subject = new Descriptor(MediaTypes.OCI_MANIFEST, image.manifest.digest(), image.manifest.raw().length,
        Map.of());
    RuntimeImagePublisher publisher = RuntimeImagePublisher.of(client);
    publisher.push(built.index(), built.blob(), subject);
    artifact = publisher.list(image.manifest.digest()).get(0);
    registry.log.clear();
    registry.blobBytesSent.set(0);
  }

  @AfterEach
  void stop() throws Exception {
    for (PageCache c : caches) {
      c.close();
    }
    clients.close();
    registry.close();
  }

  /** Requests for the blob on a node without any of its content: one, the whole blob. */
  int freshNodeRequests() {
    return 1;
  }

  /** The image's TOCs as the stream gets them: here already in when it starts. */
  RuntimeImageStream.LayerIndexes indexes() {
    return tocs::get;
  }

  PageCache cache(String name) throws Exception {
    PageCache c = PageCache.open(dir.resolve(name), new CacheSettings(Optional.empty(), 64 << 20, 1L << 30,
        Duration.ofHours(1)));
    caches.add(c);
    return c;
  }

  RuntimeImageStream.Outcome load(PageCache cache, List<Digest> delivered) throws Exception {
    return new RuntimeImageStream(client, cache, new ProducerProgress(Duration.ofMillis(200)),
        (layer, path, offset, length, content) -> delivered.add(content), Verification.IMAGE, Limits.DEFAULTS)
        .load(artifact, image.manifest, indexes());
  }

  List<String> blobRequests() {
    return registry.log.stream().filter(l -> l.startsWith("GET") && l.contains("/blobs/")).toList();
  }

  /** Every extent of the index, as (layer digest, path, offset, length, digest) with its true bytes. */
  void assertCacheHoldsTheImagesBytes(PageCache cache, boolean all) throws Exception {
    Layout layout = RuntimeImageFormat.read(built.blob());
    int found = 0;
    for (LayerExtents l : layout.index().layers()) {
      for (Extent e : l.extents()) {
        Optional<byte[]> got = cache.get(e.digest());
        if (got.isPresent()) {
          found++;
          byte[] truth = image.content(l.digest(), l.files().get(e.file()));
          assertArrayEquals(java.util.Arrays.copyOfRange(truth, (int) e.fileOffset(), (int) e.fileEnd()), got.get());
        } else {
          assertFalse(all, "missing " + l.files().get(e.file()) + " at " + e.fileOffset());
        }
      }
    }
    assertTrue(found > 0);
  }

  @Test
  void freshNode_everyFrameInOneResponse_everyExtentVerifiedIntoTheCache() throws Exception {
    PageCache cache = cache("fresh");
    List<Digest> delivered = new ArrayList<>();
    RuntimeImageStream.Outcome o = load(cache, delivered);
    assertEquals(Optional.empty(), o.failure(), o.detail());
    assertFalse(o.incremental());
    assertEquals(freshNodeRequests(), blobRequests().size(), registry.log.toString());
    assertEquals(freshNodeRequests(), o.requests());
    assertEquals(distinct(layoutOf().index().layers().stream().flatMap(l -> l.extents().stream()).toList()),
        o.contents());
    assertEquals(o.contents(), o.delivered());
    assertEquals(o.delivered(), delivered.size());
    assertEquals(built.blob().length, registry.blobBytesSent.get());
    assertCacheHoldsTheImagesBytes(cache, true);
  }

  @Test
  void contentAlreadyOnTheNode_onlyTheFramesHoldingMissingContentAreFetched() throws Exception {
    Layout layout = RuntimeImageFormat.read(built.blob());
    PageCache cache = cache("incremental");
    // The node already has every extent of frame 0 (another service brought them).
    List<int[]> frame0 = RuntimeImageDecoder.extentsByFrame(layout.index()).get(0);
    for (int[] le : frame0) {
      LayerExtents l = layout.index().layers().get(le[0]);
      Extent e = l.extents().get(le[1]);
      byte[] truth = image.content(l.digest(), l.files().get(e.file()));
      cache.put(e.digest(), java.util.Arrays.copyOfRange(truth, (int) e.fileOffset(), (int) e.fileEnd()));
    }
    RuntimeImageStream.Outcome o = load(cache, new ArrayList<>());
    assertEquals(Optional.empty(), o.failure(), o.detail());
    assertTrue(o.incremental());
    long inFrame0 = distinct(extents(layout, frame0));
    assertEquals(inFrame0, o.reused());
    assertEquals(o.contents() - inFrame0, o.delivered());
    long frames = 0;
    for (int f = 1; f < layout.index().frames().size(); f++) {
      frames += layout.index().frames().get(f).length();
    }
    assertEquals(layout.dataStart() + frames, registry.blobBytesSent.get(), "the index, then frames 1.. only: "
        + blobRequests());
    assertTrue(blobRequests().stream().noneMatch(r -> r.contains("bytes=" + layout.dataStart() + "-")),
        "frame 0 was not asked for: " + blobRequests());
    assertCacheHoldsTheImagesBytes(cache, true);
  }

  @Test
  void flippedByteInAFrame_thatFramesExtentsAreRejected_theRestDelivered_nothingWrongCached() throws Exception {
    Layout layout = RuntimeImageFormat.read(built.blob());
    long at = layout.frameStart(1) + layout.index().frames().get(1).length() / 2;
    registry.blobFault = b -> {
      byte[] c = b.clone();
      c[(int) at] ^= 0x5a;
      return c;
    };
    PageCache cache = cache("flipped");
    RuntimeImageStream.Outcome o = load(cache, new ArrayList<>());
    assertTrue(o.failure().isPresent(), "said why");
    long bad = o.rejected().getOrDefault(RejectionKind.BAD_FRAME, 0L) + o.rejected().getOrDefault(RejectionKind.BAD_EXTENT, 0L);
    // zstd frames carry no checksum: a flipped byte either breaks the frame or changes an extent's bytes.
    assertTrue(bad >= 1, o.toString());
    assertTrue(o.delivered() < o.contents(), o.toString());
    assertTrue(o.delivered() >= o.contents() - distinct(extents(layout,
        RuntimeImageDecoder.extentsByFrame(layout.index()).get(1))), "only frame 1 is lost: " + o);
    assertCacheHoldsTheImagesBytes(cache, false);
    // What frame 1 was to bring is given up at once: no reservation is left for a reader to wait on.
    for (Extent e : extents(layout, RuntimeImageDecoder.extentsByFrame(layout.index()).get(1))) {
      if (!cache.contains(e.digest())) {
        Optional<dev.flatpull.pagecache.Reservation> r = cache.reserve(e.digest());
        assertTrue(r.isPresent(), "a reservation of rejected content was left pending: " + e);
        r.get().abandon();
      }
    }
  }

  /** The image's next version: its data file changed; another manifest, whose runtime image is the one above. */
  TestImage nextVersion() throws Exception {
    Map<String, byte[]> top = new java.util.LinkedHashMap<>(image.layerFiles.get(1));
    top.put("srv/data", TestImage.random(99, 100_000));
    return new TestImage(LayerFormat.ESTARGZ, 16 * 1024, java.nio.file.Files.createDirectories(dir.resolve("next")),
        List.of(image.layerFiles.get(0), top));
  }

  RuntimeImageStream streamInto(PageCache cache, List<Digest> delivered) {
    return new RuntimeImageStream(client, cache, new ProducerProgress(Duration.ofMillis(200)),
        (layer, path, offset, length, content) -> delivered.add(content), Verification.IMAGE, Limits.DEFAULTS);
  }

  @Test
  void borrowedByTheNextVersion_onlyFramesItUsesAreFetched_andWhatArrivesIsTheNextVersionsBytes() throws Exception {
    TestImage next = nextVersion();
    Map<Digest, LayerIndex> nextTocs = next.indexes();
    PageCache cache = cache("borrowed");
    List<Digest> delivered = new ArrayList<>();
    RuntimeImageStream stream = streamInto(cache, delivered);

    RuntimeImageStream.Borrowable b = stream.readForBorrowing(artifact, image.manifest.digest(), next.manifest,
        nextTocs::get);
    RuntimeImageStream.Outcome o = stream.borrow(b, next.manifest, nextTocs::get);

    assertEquals(Optional.empty(), o.failure(), o.detail());
    assertTrue(b.rebound().overlap() > 0.5 && b.rebound().overlap() < 1, b.rebound().toString());
    assertEquals(distinct(b.layout().index().layers().stream().flatMap(l -> l.extents().stream()).toList()),
        o.delivered());
    // Its index once, then the frames that carry what the next version has: data's frames are left alone.
    long framesKept = b.layout().index().frames().size() - RuntimeImageDecoder.extentsByFrame(b.layout().index())
        .stream().filter(List::isEmpty).count();
    assertTrue(framesKept < built.index().frames().size(), b.rebound().toString());
    long fetched = registry.blobBytesSent.get();
    assertTrue(fetched < built.blob().length, fetched + " of " + built.blob().length + " bytes fetched");
    assertCacheHoldsTheNextVersionsBytes(cache, b, next);
  }

  /** Every extent {@code b} kept is in {@code cache} as {@code next}'s bytes; nothing of the changed data is kept. */
  static void assertCacheHoldsTheNextVersionsBytes(PageCache cache, RuntimeImageStream.Borrowable b, TestImage next)
      throws Exception {
    for (LayerExtents l : b.layout().index().layers()) {
      for (Extent e : l.extents()) {
        byte[] truth = next.content(l.digest(), l.files().get(e.file()));
        assertArrayEquals(java.util.Arrays.copyOfRange(truth, (int) e.fileOffset(), (int) e.fileEnd()),
            cache.get(e.digest()).orElseThrow(), l.files().get(e.file()) + " at " + e.fileOffset());
        assertFalse(l.files().get(e.file()).equals("/srv/data"), "data changed: nothing of it is borrowed");
      }
    }
  }

  @Test
  void borrowedAndTampered_theTamperedFramesExtentsAreRejected_nothingWrongCached() throws Exception {
    TestImage next = nextVersion();
    Map<Digest, LayerIndex> nextTocs = next.indexes();
    PageCache cache = cache("borrowed-tampered");
    RuntimeImageStream stream = streamInto(cache, new ArrayList<>());
    RuntimeImageStream.Borrowable b = stream.readForBorrowing(artifact, image.manifest.digest(), next.manifest,
        nextTocs::get);
    Layout layout = b.layout();
    int frame = RuntimeImageDecoder.extentsByFrame(layout.index()).get(0).isEmpty() ? 1 : 0;
    long at = layout.frameStart(frame) + layout.index().frames().get(frame).length() / 2;
    registry.blobFault = bytes -> {
      byte[] c = bytes.clone();
      c[(int) at] ^= 0x5a;
      return c;
    };

    RuntimeImageStream.Outcome o = stream.borrow(b, next.manifest, nextTocs::get);

    assertTrue(o.failure().isPresent(), o.toString());
    assertTrue(o.rejected().getOrDefault(RejectionKind.BAD_FRAME, 0L)
        + o.rejected().getOrDefault(RejectionKind.BAD_EXTENT, 0L) >= 1, o.toString());
    for (LayerExtents l : layout.index().layers()) {
      for (Extent e : l.extents()) {
        Optional<byte[]> got = cache.get(e.digest());
        if (got.isPresent()) {
          byte[] truth = next.content(l.digest(), l.files().get(e.file()));
          assertArrayEquals(java.util.Arrays.copyOfRange(truth, (int) e.fileOffset(), (int) e.fileEnd()), got.get());
        }
      }
    }
  }

  @Test
  void truncatedBlob_framesThatDidNotArriveAreGivenUp_andSaySo() throws Exception {
    Layout layout = RuntimeImageFormat.read(built.blob());
    int cut = (int) layout.frameStart(1) + 10;
    registry.blobFault = b -> java.util.Arrays.copyOf(b, cut);
    PageCache cache = cache("truncated");
    RuntimeImageStream.Outcome o = load(cache, new ArrayList<>());
    assertEquals(Optional.of("stream_failed"), o.failure(), o.detail());
    long inFrame0 = distinct(extents(layout, RuntimeImageDecoder.extentsByFrame(layout.index()).get(0)));
    assertEquals(inFrame0, o.delivered());
    assertEquals(o.contents() - inFrame0, o.rejected().get(RejectionKind.MISSING_FRAME));
    assertCacheHoldsTheImagesBytes(cache, false);
  }

  @Test
  void runtimeImageOfAnotherManifest_listedWithoutItsBlob_isRefusedByItsArtifactManifest_beforeTheBlobIsAsked()
      throws Exception {
    loadedForAnotherManifest(withoutItsBlob(artifact));
    assertEquals(0, blobRequests().size());
    assertEquals(1, artifactManifestRequests(), registry.log.toString());
  }

  @Test
  void runtimeImageOfAnotherManifest_listedWithItsBlob_isRefusedByItsIndex_nothingReserved_noFrameAskedForAlone()
      throws Exception {
    PageCache cache = loadedForAnotherManifest(artifact);
    // The blob as the listing names it: its artifact manifest is not asked for; its index (the blob's first bytes)
    // says which image it was built for.
    assertEquals(0, artifactManifestRequests(), registry.log.toString());
    assertEquals(1, blobRequests().size(), registry.log.toString());
    assertTrue(blobRequests().get(0).contains("bytes=0-"), blobRequests().toString());
    Layout layout = RuntimeImageFormat.read(built.blob());
    assertTrue(layout.index().layers().stream().flatMap(l -> l.extents().stream()).noneMatch(e -> cache.contains(
        e.digest())), "nothing stored");
  }

  @Test
  void listingNamesTheBlob_loadAsksNoArtifactManifest_andOneWithoutIt_stillLoadsThroughTheManifest() throws Exception {
    assertEquals(Optional.of(Digest.sha256(built.blob())), artifact.blob().map(Descriptor::digest));
    assertEquals(Optional.of((long) built.blob().length), artifact.blob().map(Descriptor::size));
    RuntimeImageStream.Outcome o = load(cache("listed"), new ArrayList<>());
    assertEquals(Optional.empty(), o.failure(), o.detail());
    assertEquals(0, registry.log.stream().filter(l -> l.contains("/manifests/")).count(), registry.log.toString());

    registry.log.clear();
    PageCache older = cache("older-listing");
    RuntimeImageStream.Outcome viaManifest = streamInto(older, new ArrayList<>())
        .load(withoutItsBlob(artifact), image.manifest, indexes());
    assertEquals(Optional.empty(), viaManifest.failure(), viaManifest.detail());
    assertEquals(o.delivered(), viaManifest.delivered());
    assertEquals(1, artifactManifestRequests(), registry.log.toString());
    assertCacheHoldsTheImagesBytes(older, true);
  }

  private long artifactManifestRequests() {
    return registry.log.stream().filter(l -> l.contains("/manifests/" + artifact.digest())).count();
  }

  /** Loads {@code a} into a fresh cache as a runtime image of another manifest with the same layers: refused. */
  private PageCache loadedForAnotherManifest(RuntimeImageArtifact a) throws Exception {
    ImageManifest other = (ImageManifest) dev.flatpull.fetcher.oci.OciDocuments.parse(
        dev.flatpull.fetcher.oci.OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST, image.manifest.config(),
            image.manifest.layers(), Map.of("another", "manifest")), MediaTypes.OCI_MANIFEST);
    PageCache cache = cache("stale");
    assertThrows(RuntimeImageMismatchException.class, () -> streamInto(cache, new ArrayList<>()).load(a, other,
        indexes()));
    return cache;
  }

  /** {@code a} as a listing written before listings named the blob gives it. */
  static RuntimeImageArtifact withoutItsBlob(RuntimeImageArtifact a) {
    Map<String, String> annotations = new java.util.HashMap<>(a.manifest().annotations());
    annotations.remove(RuntimeImageArtifact.BLOB);
    RuntimeImageArtifact older = RuntimeImageArtifact.of(new Descriptor(a.manifest().mediaType(), a.digest(),
        a.manifest().size(), annotations).withArtifactType(RuntimeImageArtifact.ARTIFACT_TYPE));
    assertEquals(Optional.empty(), older.blob());
    return older;
  }

  @Test
  void indexVerifiedOtherwiseThanTheNodeTrusts_isRefusedWhateverTheAnnotationsSay() throws Exception {
    PageCache cache = cache("distrust");
    assertThrows(RuntimeImageMismatchException.class, () -> new RuntimeImageStream(client, cache,
        new ProducerProgress(Duration.ofMillis(200)), (l, p, o, n, c) -> {}, Verification.RUNTIME_IMAGE,
        Limits.DEFAULTS)
        .load(artifact, image.manifest, indexes()));
    Layout layout = RuntimeImageFormat.read(built.blob());
    assertFalse(cache.contains(layout.index().layers().get(0).extents().get(0).digest()), "nothing entered the cache");
  }

  @Test
  void readerOfContentInFlight_getsItFromTheStream_andFromItsOwnLoaderWhenTheStreamIsHeld() throws Exception {
    Layout layout = RuntimeImageFormat.read(built.blob());
    Extent first = layout.index().layers().get(0).extents().get(0);
    Digest wanted = first.digest();
    byte[] truth = java.util.Arrays.copyOfRange(image.content(layout.index().layers().get(0).digest(),
        layout.index().layers().get(0).files().get(first.file())), (int) first.fileOffset(), (int) first.fileEnd());

    // Held back: the reader stops waiting after one stall and loads the content itself.
    PageCache held = cache("held");
    registry.blobHold = new CountDownLatch(1);
    AtomicInteger loads = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      // Named before the stream starts: naming it clears the registry's log, which could erase the stream's request.
      String blob = "/blobs/sha256:" + artifactBlob().hex();
      Future<RuntimeImageStream.Outcome> stream = pool.submit(() -> load(held, new ArrayList<>()));
      Await.until(Duration.ofSeconds(10), () -> registry.log.stream().anyMatch(l -> l.contains(blob)),
          () -> "the stream asked for " + blob + ": " + registry.log);
      byte[] got = held.getOrLoad(wanted, () -> {
        loads.incrementAndGet();
        return VerifiedContent.check(wanted, "lazy", truth);
      });
      assertArrayEquals(truth, got);
      assertEquals(1, loads.get(), "fell back to its own loader while the stream was held");
      registry.blobHold.countDown();
      assertEquals(Optional.empty(), stream.get(30, TimeUnit.SECONDS).failure());
    } finally {
      registry.blobHold = null;
      pool.shutdownNow();
    }
  }

  // --- limits: what the image allows a runtime image to ask of the node ---

  @Test
  void zstdBombIndex_isRefusedBeforeItIsDecompressed_nothingReservedNorAnyFrameFetched() throws Exception {
    // A few kilobytes of zstd announcing 32 MiB: the old bound (256 MiB) let it through, to be decompressed whole.
    Hostile bomb = HostileRuntimeImages.zstdBomb(valid(), 32 << 20);
    assertTrue(bomb.blob().length < 8192, bomb.blob().length + " bytes");
    assertRefused("index_size", bomb, cache("bomb"));
  }

  @Test
  void indexLargerThanTheImagesTocsCanNeed_isRefused_thoughItIsWellFormed() throws Exception {
    Hostile padded = HostileRuntimeImages.withUnusedFiles(valid(), 50_000);
    assertTrue(padded.blob().length < built.blob().length + (256 << 10), "compresses small: " + padded.blob().length);
    assertRefused("index_size", padded, cache("padded"));
  }

  @Test
  void blobLongerThanItsIndexPromises_isRefusedAfterTheIndex_theRestIsNeverRead() throws Exception {
    assertRefused("blob_size", HostileRuntimeImages.longer(valid(), 1 << 20), cache("longer"));
  }

  @Test
  void frameCarryingNoExtent_isNeverFetched_theRestIsDelivered() throws Exception {
    Hostile noisy = HostileRuntimeImages.withFrameWithoutExtents(valid(), 1 << 20);
    push(noisy);
    Layout layout = RuntimeImageFormat.read(noisy.blob());
    PageCache cache = cache("noise");
    RuntimeImageStream.Outcome o = load(cache, new ArrayList<>());
    assertEquals(Optional.empty(), o.failure(), o.detail());
    assertEquals(1, o.ignoredFrames());
    assertEquals(o.contents(), o.delivered());
    assertCacheHoldsTheImagesBytes(cache, true);
    // The first response (the whole blob, or its frames) stopped short of frame 1, then frames 2.. came by range.
    long noiseEnd = layout.frameStart(2);
    assertEquals(freshNodeRequests() + 1, o.requests(), blobRequests().toString());
    List<String> blobs = blobRequests();
    assertTrue(blobs.get(blobs.size() - 1).endsWith("bytes=" + noiseEnd + "-" + (noisy.blob().length - 1)),
        blobs.toString());
  }

  @Test
  void frameHoldingMoreThanItsExtents_isRefused() throws Exception {
    assertRefused("frame_size", HostileRuntimeImages.withFrameLargerThanItsExtents(valid(), 256 << 10),
        cache("padded-frame"));
  }

  @Test
  void runtimeImageOfMoreThanAWorkingSet_isRefused_atTheConfiguredShare() throws Exception {
    RuntimeImageBounds bounds = RuntimeImageBounds.of(Limits.DEFAULTS, Verification.IMAGE, tocs.values());
    double share = (double) built.index().contentBytes() / bounds.imageBytes();
    assertTrue(share > 0.05 && share < Limits.DEFAULTS.maxShare(), "the fixture's share " + share);
    PageCache cache = cache("share");
    RuntimeImageLimitException e = assertThrows(RuntimeImageLimitException.class, () -> new RuntimeImageStream(client,
        cache, new ProducerProgress(Duration.ofMillis(200)), (l, p, o, n, c) -> {}, Verification.IMAGE,
        new Limits(share * 0.9, 256, 4096)).load(artifact, image.manifest, indexes()));
    assertEquals("working_set", e.limit(), e.getMessage());
    assertTrue(e.getMessage().contains("max_share"), e.getMessage());
    assertNothingCached(cache);
    // At the share itself it is a working set.
    RuntimeImageStream.Outcome o = new RuntimeImageStream(client, cache, new ProducerProgress(Duration.ofMillis(200)),
        (l, p, off, n, c) -> {}, Verification.IMAGE, new Limits(share, 256, 4096))
        .load(artifact, image.manifest, indexes());
    assertEquals(Optional.empty(), o.failure(), o.detail());
  }

  /** Loading {@code hostile}, published, is refused for {@code limit}: nothing cached, no frame read. */
  void assertRefused(String limit, Hostile hostile, PageCache cache) throws Exception {
    push(hostile);
    RuntimeImageLimitException e = assertThrows(RuntimeImageLimitException.class, () -> load(cache,
        new ArrayList<>()));
    assertEquals(limit, e.limit(), e.getMessage());
    assertNothingCached(cache);
    // Before the TOCs are in, a fresh node asks for the head and the frames; once they are in, for nothing more.
    assertTrue(blobRequests().size() <= freshNodeRequests(), blobRequests().toString());
    assertTrue(registry.blobBytesSent.get() <= hostile.blob().length, "asked for no more than the blob");
  }

  Hostile valid() {
    return new Hostile(built.index(), built.blob());
  }

  void assertNothingCached(PageCache cache) throws Exception {
    for (LayerExtents l : built.index().layers()) {
      for (Extent e : l.extents()) {
        assertFalse(cache.contains(e.digest()), "nothing entered the cache");
      }
    }
  }

  /** Publishes {@code hostile} as the service's runtime image (replacing the fixture's), loaded from now on. */
  void push(Hostile hostile) throws Exception {
    RuntimeImageIndex index = hostile.index();
    byte[] blob = hostile.blob();
    Descriptor subject = new Descriptor(MediaTypes.OCI_MANIFEST, image.manifest.digest(), image.manifest.raw().length,
        Map.of());
    RuntimeImagePublisher publisher = RuntimeImagePublisher.of(client);
    publisher.push(index, blob, subject);
    Digest d = Digest.sha256(blob);
    for (RuntimeImageArtifact a : publisher.list(image.manifest.digest())) {
      if (RuntimeImagePublisher.blobOf(client, a, image.manifest.digest()).digest().equals(d)) {
        artifact = a;
      }
    }
    assertEquals(d, RuntimeImagePublisher.blobOf(client, artifact, image.manifest.digest()).digest());
    registry.log.clear();
    registry.blobBytesSent.set(0);
  }

  private Layout layoutOf() throws Exception {
    return RuntimeImageFormat.read(built.blob());
  }

  private static List<Extent> extents(Layout layout, List<int[]> pairs) {
    return pairs.stream().map(le -> layout.index().layers().get(le[0]).extents().get(le[1])).toList();
  }

  private static long distinct(List<Extent> extents) {
    return extents.stream().map(Extent::digest).distinct().count();
  }

  private Digest artifactBlob() throws Exception {
    Digest d = RuntimeImagePublisher.blobOf(client, artifact, image.manifest.digest()).digest();
    registry.log.clear();
    return d;
  }
}
