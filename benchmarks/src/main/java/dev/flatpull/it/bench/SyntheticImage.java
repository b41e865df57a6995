package dev.flatpull.it.bench;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import dev.flatpull.runtimeimage.RuntimeImageBuilder;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * A generated one-layer zstd:chunked image of code-like content (random bytes, half of each 64-byte line repeating, so
 * it compresses about as well as shared libraries do) in files of equal size, with a trace in which every page of
 * every {@code tracedEvery}-th file was read: the runtime-image benchmarks' fixture, shaped after no service.
 *
 * @param content every file's bytes, in order
 */
record SyntheticImage(ImageManifest manifest, Descriptor layerDescriptor, byte[] layerBlob, LayerIndex index,
    LazyLayer layer, Trace trace, byte[] content, Descriptor config, byte[] configBlob) {

  static SyntheticImage generate(Path dir, int files, int fileSize, long chunkSize, int tracedEvery)
      throws IOException {
    Path tar = dir.resolve("src.tar");
    Random r = new Random(1);
    List<String> names = new ArrayList<>();
    java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
    try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(tar))) {
      for (int f = 0; f < files; f++) {
        byte[] data = new byte[fileSize];
        r.nextBytes(data);
        // Compressible like code: half of each 64-byte line repeats.
        for (int i = 0; i < data.length; i += 64) {
          Arrays.fill(data, i, Math.min(data.length, i + 32), (byte) (i >> 6));
        }
        String name = "usr/lib/pkg/lib" + f + ".so";
        names.add("/" + name);
        all.writeBytes(data);
        TarWriter.writeEntry(out, TarHeader.regular(name, data.length, 0644, Instant.EPOCH), data);
      }
      TarWriter.writeEnd(out);
    }
    InMemoryLayer built = InMemoryLayer.write(new LazyLayerWriter(LayerFormat.ZSTD_CHUNKED, chunkSize, 3), tar,
        List.of());
    Files.delete(tar);
    byte[] layerBlob = built.blob();
    Descriptor d = built.descriptor();
    BlobReader reader = built.reader();
    LayerIndex index = built.index(FetchLimits.DEFAULTS);
    LazyLayer layer = new LazyLayer(index, reader, 64 << 10);
    byte[] configBlob = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}"
        .getBytes(java.nio.charset.StandardCharsets.UTF_8);
    Descriptor config = new Descriptor(MediaTypes.OCI_CONFIG, Digest.sha256(configBlob), configBlob.length, Map.of());
    ImageManifest manifest = (ImageManifest) OciDocuments.parse(
        OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST, config, List.of(d), Map.of()), null);
    List<PageRun> runs = new ArrayList<>();
    List<String> traced = new ArrayList<>();
    int pages = (fileSize + 4095) / 4096;
    for (int f = 0; f < files; f += tracedEvery) {
      runs.add(new PageRun(traced.size(), 0, pages, traced.size(), 1));
      traced.add(names.get(f));
    }
    Trace trace = new Trace(new ServiceVersion("bench", manifest.digest().toString(), "linux/amd64", List.of(),
        List.of(), "", List.of("exit")), "bench", Instant.EPOCH, List.of(1L), List.of(new LayerTrace(
            d.digest().toString(), traced, runs)));
    return new SyntheticImage(manifest, d, layerBlob, index, layer, trace, all.toByteArray(), config, configBlob);
  }

  /** The runtime image of the trace, built as CI builds it. */
  RuntimeImageBuilder.Built runtimeImage(RuntimeImageSettings settings) throws IOException {
    return new RuntimeImageBuilder(settings, InstantSource.system(), "bench", line -> {})
        .build(trace, manifest, x -> layer);
  }
}
