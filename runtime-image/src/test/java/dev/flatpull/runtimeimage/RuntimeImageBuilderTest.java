package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Frame;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.trace.Trace;
import java.nio.file.Path;
import java.time.Instant;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class RuntimeImageBuilderTest {
  @TempDir Path dir;

  static final byte[] SHARED = TestImage.random(7, 40_000);

  TestImage image(LayerFormat format) throws Exception {
    return imageIn(dir, format);
  }

  TestImage imageIn(Path dir, LayerFormat format) throws Exception {
    Map<String, byte[]> base = new LinkedHashMap<>();
    base.put("usr/bin/app", TestImage.random(1, 300_000));
    base.put("usr/lib/libshared.so", SHARED);
    base.put("usr/lib/copy-of-shared.so", SHARED.clone());
    base.put("etc/config", "key = value\n".getBytes());
    Map<String, byte[]> top = new LinkedHashMap<>();
    top.put("srv/data", TestImage.random(2, 100_000));
    top.put("srv/shared-again.so", SHARED.clone());
    return new TestImage(format, 16 * 1024, dir, List.of(base, top));
  }

  static Trace trace(TestImage img) {
    return img.trace(List.of(
        List.<Object[]>of(new Object[] {"/usr/bin/app", 0, 3}, new Object[] {"/usr/lib/libshared.so", 0, 10},
            new Object[] {"/usr/bin/app", 40, 5}, new Object[] {"/usr/lib/copy-of-shared.so", 0, 10},
            new Object[] {"/etc/config", 0, 1}),
        List.<Object[]>of(new Object[] {"/srv/data", 2, 4}, new Object[] {"/srv/shared-again.so", 0, 10})));
  }

  static RuntimeImageBuilder builder(Verification v) {
    return new RuntimeImageBuilder(RuntimeImageSettings.DEFAULTS.withVerify(v).withFrameSize(64 * 1024),
        InstantSource.fixed(Instant.parse("2026-12-01T00:00:00Z")), "test", line -> {});
  }

  @ParameterizedTest
  @CsvSource({"ESTARGZ,IMAGE", "ESTARGZ,RUNTIME_IMAGE", "ZSTD_CHUNKED,IMAGE", "ZSTD_CHUNKED,RUNTIME_IMAGE"})
  void build_thenDecode_servesExactlyTheImagesBytesForEveryTracedPage(LayerFormat format, Verification v)
      throws Exception {
    TestImage img = image(format);
    Trace trace = trace(img);
    RuntimeImageBuilder.Built built = builder(v).build(trace, img.manifest, img.source());
    RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(built.blob());
    assertEquals(built.index(), layout.index());
    ImageBinding binding = ImageBinding.bind(layout.index(), img.manifest, img.indexes());
    List<long[]> served = new ArrayList<>();
    RuntimeImageDecoder.Result r = RuntimeImageDecoder.decode(layout, built.blob(), binding, (l, e, content) -> {
      LayerExtents layer = layout.index().layers().get(l);
      Extent x = layer.extents().get(e);
      byte[] truth = img.content(layer.digest(), layer.files().get(x.file()));
      assertArrayEquals(Arrays.copyOfRange(truth, (int) x.fileOffset(), (int) x.fileEnd()), content.bytes(),
          layer.files().get(x.file()) + " at " + x.fileOffset());
      served.add(new long[] {l, x.file(), x.fileOffset(), x.fileEnd()});
    });
    assertTrue(r.rejected().isEmpty(), r.rejected().toString());
    assertEquals(layout.index().extentCount(), r.accepted());
    // Every traced page is covered by what the runtime image serves.
    for (int l = 0; l < trace.layers().size(); l++) {
      var lt = trace.layers().get(l);
      for (var run : lt.runs()) {
        for (long p = run.firstPage(); p < run.firstPage() + run.pages(); p++) {
          long off = p * 4096;
          int layer = l;
          int file = layout.index().layers().get(l).files().indexOf(lt.files().get(run.file()));
          assertTrue(served.stream().anyMatch(s -> s[0] == layer && s[1] == file && s[2] <= off && off < s[3]),
              lt.files().get(run.file()) + " page " + p + " is not served");
        }
      }
    }
    if (v == Verification.RUNTIME_IMAGE) {
      assertEquals(trace.pages(), layout.index().extentCount(), "page mode stores the traced pages, no more");
    } else {
      assertTrue(layout.index().servedBytes() >= trace.bytes() - 4096, "whole chunks cover the pages");
    }
  }

  @ParameterizedTest
  @CsvSource({"IMAGE", "RUNTIME_IMAGE"})
  void identicalContent_acrossFilesAndLayers_isStoredOnce(Verification v) throws Exception {
    TestImage img = image(LayerFormat.ESTARGZ);
    RuntimeImageBuilder.Built built = builder(v).build(img.trace(List.of(
        List.<Object[]>of(new Object[] {"/usr/lib/libshared.so", 0, 10}, new Object[] {"/usr/lib/copy-of-shared.so", 0, 10}),
        List.<Object[]>of(new Object[] {"/srv/shared-again.so", 0, 10}))), img.manifest, img.source());
    RuntimeImageIndex index = built.index();
    assertEquals(3 * index.contentBytes(), index.servedBytes(), "three files, one stored copy");
    assertEquals(SHARED.length, index.contentBytes());
    assertEquals(built.statistics().extents(), 3 * built.statistics().uniqueExtents());
    Extent first = index.layers().get(0).extents().get(0);
    Extent inTopLayer = index.layers().get(1).extents().get(0);
    assertEquals(first.frame(), inTopLayer.frame(), "the upper layer's copy points at the base layer's frame");
  }

  @ParameterizedTest
  @CsvSource({"IMAGE", "RUNTIME_IMAGE"})
  void frames_holdOneLayerEach_inFirstAccessOrder_withinTheFrameSize(Verification v) throws Exception {
    TestImage img = image(LayerFormat.ZSTD_CHUNKED);
    RuntimeImageIndex index = builder(v).build(trace(img), img.manifest, img.source()).index();
    for (Frame f : index.frames()) {
      assertTrue(f.size() <= 64 * 1024 || v == Verification.IMAGE && f.size() <= 64 * 1024 + 16 * 1024, f.toString());
    }
    for (int l = 0; l < index.layers().size(); l++) {
      for (Extent e : index.layers().get(l).extents()) {
        Frame f = index.frames().get(e.frame());
        boolean shared = f.layer() != l;
        assertTrue(!shared || Arrays.equals(SHARED, img.content(index.layers().get(l).digest(),
            index.layers().get(l).files().get(e.file()))), "only deduplicated content is in another layer's frame");
      }
    }
    // Content is stored in first-access order: each new content lies after all content stored before it.
    List<Extent> base = index.layers().get(0).extents();
    assertEquals("/usr/bin/app", index.layers().get(0).files().get(base.get(0).file()));
    java.util.Set<dev.flatpull.core.Digest> seen = new java.util.HashSet<>();
    long before = -1;
    for (Extent e : base) {
      if (seen.add(e.digest())) {
        long at = (long) e.frame() << 32 | e.frameOffset();
        assertTrue(at > before, "stored in access order: " + e);
        before = at;
      }
    }
  }

  @org.junit.jupiter.api.Test
  void build_reportsTheChunksBytesFetched_fromNoneToAll_neverBackwards() throws Exception {
    TestImage img = image(LayerFormat.ESTARGZ);
    List<long[]> reported = new ArrayList<>();
    List<String> steps = new ArrayList<>();
    dev.flatpull.core.Progress progress = new dev.flatpull.core.Progress() {
      @Override
      public void step(String line) {
        steps.add(line);
      }

      @Override
      public void bytes(String what, long done, long total) {
        reported.add(new long[] {done, total});
      }
    };
    RuntimeImageBuilder.Built built = new RuntimeImageBuilder(RuntimeImageSettings.DEFAULTS.withFrameSize(64 * 1024),
        InstantSource.fixed(Instant.parse("2026-12-01T00:00:00Z")), "test", progress).build(trace(img), img.manifest,
        img.source());

    assertTrue(reported.size() >= 2, "a start and an end");
    long total = reported.get(0)[1];
    assertEquals(0, reported.get(0)[0]);
    assertEquals(total, reported.get(reported.size() - 1)[0]);
    for (int i = 1; i < reported.size(); i++) {
      assertTrue(reported.get(i)[0] >= reported.get(i - 1)[0] && reported.get(i)[1] == total);
    }
    // Whole chunks in the default mode: what was fetched is at least the unique content stored.
    assertTrue(total >= built.statistics().contentBytes(), total + " < " + built.statistics().contentBytes());
    assertTrue(steps.stream().anyMatch(l -> l.startsWith("read ")), steps.toString());
  }
}
