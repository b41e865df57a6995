package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class TraceRebaseTest {
  @TempDir Path dir;

  static final byte[] APP = TestImage.random(1, 300_000);
  static final byte[] SHARED = TestImage.random(7, 40_000);
  static final byte[] MOVED = TestImage.random(5, 50_000);

  /** The old version: a base layer and an application layer. */
  TestImage oldImage() throws Exception {
    Map<String, byte[]> base = new LinkedHashMap<>();
    base.put("usr/bin/app", APP);
    base.put("usr/lib/libshared.so", SHARED);
    base.put("etc/config", "key = value\n".getBytes(StandardCharsets.US_ASCII));
    Map<String, byte[]> top = new LinkedHashMap<>();
    top.put("srv/data", TestImage.random(2, 100_000));
    top.put("srv/old-name.so", MOVED);
    return new TestImage(LayerFormat.ESTARGZ, 16 * 1024, Files.createDirectories(dir.resolve("old")),
        List.of(base, top));
  }

  /**
   * The new version: the base with its configuration changed, the application's data changed and a library renamed,
   * and one layer more that replaces the shared library (the old one stays in the base, hidden).
   */
  TestImage newImage() throws Exception {
    Map<String, byte[]> base = new LinkedHashMap<>();
    base.put("usr/bin/app", APP);
    base.put("usr/lib/libshared.so", SHARED);
    base.put("etc/config", "key = other\n".getBytes(StandardCharsets.US_ASCII));
    Map<String, byte[]> top = new LinkedHashMap<>();
    top.put("srv/data", TestImage.random(3, 100_000));
    top.put("srv/new-name.so", MOVED);
    Map<String, byte[]> added = new LinkedHashMap<>();
    added.put("usr/lib/libshared.so", TestImage.random(9, 40_000));
    return new TestImage(LayerFormat.ESTARGZ, 16 * 1024, Files.createDirectories(dir.resolve("new")),
        List.of(base, top, added));
  }

  static Trace trace(TestImage img) {
    return img.trace(List.of(
        List.<Object[]>of(new Object[] {"/usr/bin/app", 0, 3}, new Object[] {"/usr/lib/libshared.so", 0, 10},
            new Object[] {"/usr/bin/app", 40, 5}, new Object[] {"/etc/config", 0, 1}),
        List.<Object[]>of(new Object[] {"/srv/data", 2, 4}, new Object[] {"/srv/old-name.so", 0, 4})));
  }

  static List<LazyLayer> layers(TestImage img) throws Exception {
    List<LazyLayer> out = new ArrayList<>();
    for (int i = 0; i < img.descriptors.size(); i++) {
      out.add(new LazyLayer(img.index(i), img.reader(i), 64 * 1024));
    }
    return out;
  }

  static ServiceVersion on(TestImage img, Trace old) {
    ServiceVersion s = old.service();
    return new ServiceVersion("registry.test/app:2", img.manifest.digest().toString(), s.platform(), s.command(),
        s.environment(), s.workingDirectory(), s.probes());
  }

  @Test
  void rebase_carriesWhatTheNewImageShowsByContent_dropsWhatChangedOrIsHidden_andCountsEachByte() throws Exception {
    TestImage old = oldImage();
    TestImage img = newImage();
    Trace trace = trace(old);

    TraceRebase.Rebased r = TraceRebase.rebase(trace, old.indexes(), on(img, trace), layers(img));

    // app: pages 0-2 and 40-44 at the same place; libshared: 40,000 bytes hidden by the new layer; config: 12
    // bytes changed; data: four pages changed; the renamed library: four pages found by their chunk's digest.
    assertEquals(12_288 + 20_480, r.samePathBytes());
    assertEquals(16_384, r.movedBytes());
    assertEquals(12_288 + 20_480 + 40_000 + 12 + 16_384 + 16_384, r.tracedBytes());
    assertEquals(40_000 + 12 + 16_384, r.droppedBytes());
    assertEquals((12_288 + 20_480 + 16_384) / (double) r.tracedBytes(), r.overlap(), 1e-9);
    assertEquals(img.manifest.digest().toString(), r.trace().service().manifestDigest());
    assertEquals(trace.service().command(), r.trace().service().command());

    // Built as from any trace: every extent is the new image's bytes, none of a changed or hidden file.
    RuntimeImageBuilder.Built built = RuntimeImageBuilderTest.builder(Verification.IMAGE)
        .build(r.trace(), img.manifest, img.source());
    RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(built.blob());
    ImageBinding binding = ImageBinding.bind(layout.index(), img.manifest, img.indexes());
    Set<String> served = new HashSet<>();
    RuntimeImageDecoder.Result decoded = RuntimeImageDecoder.decode(layout, built.blob(), binding, (l, e, c) -> {
      LayerExtents layer = layout.index().layers().get(l);
      Extent x = layer.extents().get(e);
      String path = layer.files().get(x.file());
      byte[] truth = img.content(layer.digest(), path);
      assertArrayEquals(Arrays.copyOfRange(truth, (int) x.fileOffset(), (int) x.fileEnd()), c.bytes(), path);
      served.add(path);
    });
    assertTrue(decoded.rejected().isEmpty(), decoded.rejected().toString());
    assertEquals(Set.of("/usr/bin/app", "/srv/new-name.so"), served);
  }

  @Test
  void rebase_ofARuntimeImagesOwnTrace_ontoItsOwnImage_keepsEveryExtent() throws Exception {
    TestImage old = oldImage();
    RuntimeImageBuilder.Built built = RuntimeImageBuilderTest.builder(Verification.IMAGE)
        .build(trace(old), old.manifest, old.source());
    Trace fromIndex = TraceRebase.traceOf(built.index());
    long extentBytes = built.index().layers().stream().flatMap(l -> l.extents().stream())
        .mapToLong(Extent::length).sum();

    TraceRebase.Rebased r = TraceRebase.rebase(fromIndex, old.indexes(), fromIndex.service(), layers(old));

    assertEquals(1.0, r.overlap(), 1e-9);
    assertEquals(extentBytes, r.samePathBytes());
    RuntimeImageBuilder.Built again = RuntimeImageBuilderTest.builder(Verification.IMAGE)
        .build(r.trace(), old.manifest, old.source());
    assertEquals(built.index().layers(), again.index().layers());
  }

  @Test
  void rebase_ontoAnUnrelatedImage_carriesNothing() throws Exception {
    TestImage old = oldImage();
    Map<String, byte[]> other = new LinkedHashMap<>();
    other.put("usr/bin/app", TestImage.random(11, 300_000));
    other.put("srv/data", TestImage.random(12, 100_000));
    TestImage unrelated = new TestImage(LayerFormat.ESTARGZ, 16 * 1024, Files.createDirectories(dir.resolve("x")),
        List.of(other));
    Trace trace = trace(old);

    TraceRebase.Rebased r = TraceRebase.rebase(trace, old.indexes(), on(unrelated, trace), layers(unrelated));

    assertEquals(0.0, r.overlap());
    assertEquals(r.tracedBytes(), r.droppedBytes());
    assertTrue(r.trace().layers().isEmpty());
  }
}
