package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.fetcher.layer.LayerFormat;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A runtime image of one version re-pointed at the next ({@link TraceRebaseTest}'s two versions). */
class BorrowedIndexTest {
  @TempDir Path dir;

  @Test
  void rebind_keepsWhatTheNewImageShowsAtItsNewPlace_andEveryKeptExtentDecodesToTheNewImagesBytes() throws Exception {
    TestImage old = TraceRebaseTest.oldImage(dir);
    TestImage img = TraceRebaseTest.newImage(dir);
    RuntimeImageBuilder.Built built = RuntimeImageBuilderTest.builder(Verification.IMAGE)
        .build(TraceRebaseTest.trace(old), old.manifest, old.source());

    BorrowedIndex.Rebound r = BorrowedIndex.rebind(built.index(), img.manifest, img.indexes());

    // The old runtime image's whole chunks: app 0 and 10-11, libshared 0-2 (40,000 bytes), the configuration,
    // data 0-1, the renamed library's first. The new image shows app's and the renamed library's (elsewhere).
    assertEquals(3 * 16_384 + 40_000 + 12 + 2 * 16_384 + 16_384, r.extentBytes());
    assertEquals(3 * 16_384 + 16_384, r.matchedBytes());
    assertEquals(r.matchedBytes() / (double) r.extentBytes(), r.overlap(), 1e-12);
    assertTrue(r.keptBytes() > 0 && r.keptBytes() <= r.matchedBytes(), r.toString());
    assertEquals(img.manifest.digest(), r.index().manifestDigest());

    // Bound to the new image like any runtime image, decoded from the old blob: the new image's bytes, every one.
    RuntimeImageFormat.Layout layout = new RuntimeImageFormat.Layout(r.index(),
        RuntimeImageFormat.read(built.blob()).indexLength());
    Set<String> served = new HashSet<>();
    Map<Integer, Long> usePerFrame = new HashMap<>();
    Set<List<Integer>> stored = new HashSet<>();
    for (TestImage.Served x : img.decodeAndCheck(layout, built.blob())) {
      served.add(x.path());
      if (stored.add(List.of(x.extent().frame(), x.extent().frameOffset()))) {
        usePerFrame.merge(x.extent().frame(), (long) x.extent().length(), Long::sum);
      }
    }
    assertTrue(Set.of("/usr/bin/app", "/srv/new-name.so").containsAll(served), served.toString());
    // A frame is fetched only for at least half of what it holds.
    usePerFrame.forEach((f, used) -> assertTrue(used >= BorrowedIndex.MIN_FRAME_USE
        * built.index().frames().get(f).size(), "frame " + f + ": " + used + " of " + built.index().frames().get(f)));
  }

  @Test
  void rebind_withFramesOfOneChunk_keepsEveryMatchedChunk() throws Exception {
    TestImage old = TraceRebaseTest.oldImage(dir);
    TestImage img = TraceRebaseTest.newImage(dir);
    RuntimeImageBuilder.Built built = new RuntimeImageBuilder(dev.flatpull.config.RuntimeImageSettings.DEFAULTS
        .withFrameSize(16 * 1024), java.time.InstantSource.system(), "test", line -> {})
        .build(TraceRebaseTest.trace(old), old.manifest, old.source());

    BorrowedIndex.Rebound r = BorrowedIndex.rebind(built.index(), img.manifest, img.indexes());

    assertEquals(r.matchedBytes(), r.keptBytes());
    assertEquals(4, r.keptFrames());
  }

  @Test
  void rebind_ofAPageModeRuntimeImage_isRefused() throws Exception {
    TestImage old = TraceRebaseTest.oldImage(dir);
    RuntimeImageBuilder.Built built = RuntimeImageBuilderTest.builder(Verification.RUNTIME_IMAGE)
        .build(TraceRebaseTest.trace(old), old.manifest, old.source());
    TestImage img = TraceRebaseTest.newImage(dir);

    RuntimeImageMismatchException e = assertThrows(RuntimeImageMismatchException.class,
        () -> BorrowedIndex.rebind(built.index(), img.manifest, img.indexes()));
    assertTrue(e.getMessage().contains("never borrowed"), e.getMessage());
  }

  @Test
  void rebind_ontoAnUnrelatedImage_keepsNothing() throws Exception {
    TestImage old = TraceRebaseTest.oldImage(dir);
    RuntimeImageBuilder.Built built = RuntimeImageBuilderTest.builder(Verification.IMAGE)
        .build(TraceRebaseTest.trace(old), old.manifest, old.source());
    Map<String, byte[]> other = new LinkedHashMap<>();
    other.put("usr/bin/app", TestImage.random(11, 300_000));
    TestImage unrelated = new TestImage(LayerFormat.ESTARGZ, 16 * 1024, Files.createDirectories(dir.resolve("u")),
        List.of(other));

    BorrowedIndex.Rebound r = BorrowedIndex.rebind(built.index(), unrelated.manifest, unrelated.indexes());

    assertEquals(0.0, r.overlap());
    assertEquals(0, r.keptBytes());
    assertTrue(r.index().layers().isEmpty());
  }

  /** Found elsewhere than at its path by digest only where sought; at its own path whatever was sought. */
  @Test
  void chunkPlaces_findsByDigestElsewhere_onlyWhatWasSought() throws Exception {
    TestImage img = TraceRebaseTest.newImage(dir);
    Map<dev.flatpull.core.Digest, dev.flatpull.fetcher.layer.LayerIndex> indexes = img.indexes();
    List<dev.flatpull.fetcher.layer.LayerIndex> layers = img.manifest.layers().stream()
        .map(d -> indexes.get(d.digest())).filter(java.util.Objects::nonNull).toList();
    dev.flatpull.fetcher.layer.LayerChunk app = layers.stream().flatMap(l -> l.entry("/usr/bin/app").stream())
        .findFirst().orElseThrow().chunks().get(0);
    dev.flatpull.fetcher.layer.LayerChunk lib = layers.stream().flatMap(l -> l.entry("/srv/new-name.so").stream())
        .findFirst().orElseThrow().chunks().get(0);

    ChunkPlaces both = new ChunkPlaces(layers, Set.of(app.digest(), lib.digest()));
    assertEquals("usr/bin/app", both.find("/elsewhere", 0, app.size(), app.digest()).orElseThrow().file().name());
    assertEquals("srv/new-name.so", both.find("/elsewhere", 0, lib.size(), lib.digest()).orElseThrow().file().name());
    assertTrue(both.find("/elsewhere", 0, lib.size() + 1, lib.digest()).isEmpty(), "another size is another chunk");
    ChunkPlaces one = new ChunkPlaces(layers, Set.of(lib.digest()));
    assertEquals("srv/new-name.so", one.find("/elsewhere", 0, lib.size(), lib.digest()).orElseThrow().file().name());
    assertTrue(one.find("/elsewhere", 0, app.size(), app.digest()).isEmpty(), "found what was not sought");
    assertTrue(one.find("/usr/bin/app", 0, app.size(), app.digest()).orElseThrow().samePath());
  }
}
