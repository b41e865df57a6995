package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.BuiltLayer;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * An image of lazily readable layers written by flatpull's own writer and held in memory, with the files' true
 * content (the reference a runtime image is checked against) and a way to make traces of it.
 */
final class TestImage {
  final List<Map<String, byte[]>> layerFiles = new ArrayList<>();
  final List<Descriptor> descriptors = new ArrayList<>();
  final List<byte[]> blobs = new ArrayList<>();
  final ImageManifest manifest;
  final LayerFormat format;
  final AtomicInteger requests = new AtomicInteger();

  TestImage(LayerFormat format, long chunkSize, Path dir, List<Map<String, byte[]>> layers) throws IOException {
    this.format = format;
    for (Map<String, byte[]> files : layers) {
      layerFiles.add(files);
      BuiltLayer layer = BuiltLayer.write(LayerTar.of(files), format, chunkSize, List.of(), dir);
      descriptors.add(layer.descriptor);
      blobs.add(layer.blob);
    }
    Descriptor config = new Descriptor(MediaTypes.OCI_CONFIG, Digest.sha256(new byte[] {1}), 1, Map.of());
    manifest = (ImageManifest) OciDocuments.parse(
        OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST, config, descriptors, Map.of()), MediaTypes.OCI_MANIFEST);
  }

  static byte[] random(long seed, int size) {
    byte[] b = new byte[size];
    new java.util.Random(seed).nextBytes(b);
    // Compressible like real binaries: runs of repeated bytes between random ones.
    for (int i = 0; i < size; i += 64) {
      Arrays.fill(b, i, Math.min(size, i + 32), (byte) (i / 64));
    }
    return b;
  }

  BlobReader reader(int layer) {
    return range -> {
      requests.incrementAndGet();
      return Arrays.copyOfRange(blobs.get(layer), (int) range.offset(), (int) range.end());
    };
  }

  LayerIndex index(int layer) throws IOException {
    return format.readToc(descriptors.get(layer), reader(layer), FetchLimits.DEFAULTS);
  }

  Map<Digest, LayerIndex> indexes() throws IOException {
    Map<Digest, LayerIndex> out = new LinkedHashMap<>();
    for (int i = 0; i < descriptors.size(); i++) {
      out.put(descriptors.get(i).digest(), index(i));
    }
    return out;
  }

  RuntimeImageBuilder.LayerSource source() {
    return d -> {
      int i = descriptors.indexOf(d);
      return new LazyLayer(index(i), reader(i), 64 * 1024);
    };
  }

  /** The true bytes of {@code path} in {@code layer}. */
  byte[] content(Digest layer, String path) {
    for (int i = 0; i < descriptors.size(); i++) {
      if (descriptors.get(i).digest().equals(layer)) {
        return layerFiles.get(i).get(path.substring(1));
      }
    }
    throw new IllegalArgumentException("no layer " + layer);
  }

  ServiceVersion service() {
    return new ServiceVersion("registry.test/app:1", manifest.digest().toString(), "linux/amd64",
        List.of("app", "--serve"), List.of(), "", List.of("exit"));
  }

  /** A trace: per layer, runs {file path, first page, pages} in the order given, first access in list order. */
  Trace trace(List<List<Object[]>> runsPerLayer) {
    List<LayerTrace> layers = new ArrayList<>();
    long micros = 0;
    for (int l = 0; l < runsPerLayer.size(); l++) {
      List<String> files = new ArrayList<>();
      List<PageRun> runs = new ArrayList<>();
      for (Object[] r : runsPerLayer.get(l)) {
        String path = (String) r[0];
        if (!files.contains(path)) {
          files.add(path);
        }
        runs.add(new PageRun(files.indexOf(path), ((Number) r[1]).longValue(), ((Number) r[2]).intValue(),
            micros += 10, 1));
      }
      if (!runs.isEmpty()) {
        layers.add(new LayerTrace(descriptors.get(l).digest().toString(), files, runs));
      }
    }
    return new Trace(service(), "test", Instant.parse("2026-11-30T00:00:00Z"), List.of(800L), layers);
  }

  /** An extent a runtime image served, in layer {@code layer}. */
  record Served(Digest layer, String path, Extent extent) {}

  /**
   * Binds {@code layout} (whose blob is {@code blob}) to this image, decodes it and checks that every extent is this
   * image's true bytes and that none is rejected; what was served, in the order decoded.
   */
  List<Served> decodeAndCheck(RuntimeImageFormat.Layout layout, byte[] blob) throws IOException {
    ImageBinding binding = ImageBinding.bind(layout.index(), manifest, indexes());
    List<Served> out = new ArrayList<>();
    RuntimeImageDecoder.Result r = RuntimeImageDecoder.decode(layout, blob, binding, (l, e, c) -> {
      LayerExtents layer = layout.index().layers().get(l);
      Extent x = layer.extents().get(e);
      String path = layer.files().get(x.file());
      assertArrayEquals(Arrays.copyOfRange(content(layer.digest(), path), (int) x.fileOffset(), (int) x.fileEnd()),
          c.bytes(), path + " at " + x.fileOffset());
      out.add(new Served(layer.digest(), path, x));
    });
    assertTrue(r.rejected().isEmpty(), r.rejected().toString());
    assertEquals(layout.index().extentCount(), r.accepted());
    return out;
  }
}
