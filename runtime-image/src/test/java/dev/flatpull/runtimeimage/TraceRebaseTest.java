package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
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
  static TestImage oldImage(Path dir) throws Exception {
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
  static TestImage newImage(Path dir) throws Exception {
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

  static List<LayerIndex> layers(TestImage img) throws Exception {
    List<LayerIndex> out = new ArrayList<>();
    for (int i = 0; i < img.descriptors.size(); i++) {
      out.add(img.index(i));
    }
    return out;
  }

  static ServiceVersion on(TestImage img, Trace old) {
    ServiceVersion s = old.service();
    return new ServiceVersion("registry.test/app:2", img.manifest.digest().toString(), s.platform(), s.command(),
        s.environment(), s.workingDirectory(), s.probes());
  }

  @Test
  void rebase_carriesWhatTheNewImageShowsByContent_takesChangedFilesAtTheirPath_andCountsEachByte() throws Exception {
    TestImage old = oldImage(dir);
    TestImage img = newImage(dir);
    Trace trace = trace(old);

    TraceRebase.Rebased r = TraceRebase.rebase(trace, old.indexes(), on(img, trace), layers(img));

    // app: pages 0-2 and 40-44 at the same place; the renamed library: four pages found by their chunk's digest.
    // Changed at their path, taken from the new files: libshared (40,000 bytes, now the added layer's), the
    // configuration (12 bytes), data (four pages).
    assertEquals(12_288 + 20_480, r.samePathBytes());
    assertEquals(16_384, r.movedBytes());
    assertEquals(40_000 + 12 + 16_384, r.changedBytes());
    assertEquals(12_288 + 20_480 + 40_000 + 12 + 16_384 + 16_384, r.tracedBytes());
    assertEquals(0, r.droppedBytes());
    assertEquals((12_288 + 20_480 + 16_384) / (double) r.tracedBytes(), r.overlap(), 1e-9);
    assertEquals(img.manifest.digest().toString(), r.trace().service().manifestDigest());
    assertEquals(trace.service().command(), r.trace().service().command());

    // Built as from any trace: every extent is the bytes the new image shows, the replaced library's from the layer
    // that replaces it.
    RuntimeImageBuilder.Built built = RuntimeImageBuilderTest.builder(Verification.IMAGE)
        .build(r.trace(), img.manifest, img.source());
    Set<String> served = new HashSet<>();
    for (TestImage.Served x : img.decodeAndCheck(RuntimeImageFormat.read(built.blob()), built.blob())) {
      served.add(x.layer().shortHex() + x.path());
    }
    String base = img.descriptors.get(0).digest().shortHex();
    String top = img.descriptors.get(1).digest().shortHex();
    String added = img.descriptors.get(2).digest().shortHex();
    assertEquals(Set.of(base + "/usr/bin/app", base + "/etc/config", top + "/srv/new-name.so", top + "/srv/data",
        added + "/usr/lib/libshared.so"), served);
  }

  @Test
  void rebase_ofARuntimeImagesOwnTrace_ontoItsOwnImage_keepsEveryExtent() throws Exception {
    TestImage old = oldImage(dir);
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
  void rebase_ontoAnUnrelatedImage_carriesNothingByContent() throws Exception {
    TestImage old = oldImage(dir);
    Map<String, byte[]> other = new LinkedHashMap<>();
    other.put("usr/bin/app", TestImage.random(11, 300_000));
    other.put("srv/data", TestImage.random(12, 100_000));
    TestImage unrelated = new TestImage(LayerFormat.ESTARGZ, 16 * 1024, Files.createDirectories(dir.resolve("x")),
        List.of(other));
    Trace trace = trace(old);

    TraceRebase.Rebased r = TraceRebase.rebase(trace, old.indexes(), on(unrelated, trace), layers(unrelated));

    // Nothing of it by content; app and data are taken at their paths, the rest is gone.
    assertEquals(0.0, r.overlap());
    assertEquals(12_288 + 20_480 + 16_384, r.changedBytes());
    assertEquals(40_000 + 12 + 16_384, r.droppedBytes());
  }
}
