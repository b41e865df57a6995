package dev.flatpull.snapshotter.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.PlainLayerIndexer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageConfig;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient.ResolvedImage;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code flatpull inspect REF}: the resolved manifest and, per layer, its format and TOC (fetched in parallel). */
@Command(name = "inspect", mixinStandardHelpOptions = true,
    description = "Show an image's manifest digest and, per layer, format, sizes, TOC digest and entry/chunk counts.")
final class InspectCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Parameters(index = "0", paramLabel = "REF", description = "Image reference, e.g. 127.0.0.1:5000/app:v1.")
  String reference;

  @Option(names = "--json", description = "Print JSON instead of a table.")
  boolean json;

  @Option(names = "--verify", description = "Download every layer whole and check that it decompresses to the"
      + " diff_id the image config gives it (what containerd checks when it unpacks); exit 1 on a mismatch.")
  boolean verify;

  /**
   * One layer as reported. Counts are -1 where they are unknown without downloading the layer (plain layers);
   * {@code uncompressedSize} is the tar size where the descriptor records it (eStargz), else null; {@code contentBytes}
   * sums the regular files' sizes from the TOC; {@code tarSplitChecked} says whether the TOC was checked against a
   * verified tar-split (zstd:chunked); {@code diffId} is the config's for the layer, and {@code diffIdMatches} whether
   * the layer decompresses to it (with {@code --verify}, else null).
   */
  record LayerReport(
      String digest, String mediaType, long compressedSize, Long uncompressedSize, String format, String tocDigest,
      int entries, int chunks, long contentBytes, boolean tarSplitChecked, Map<String, String> annotations,
      String diffId, Boolean diffIdMatches) {
    LayerReport verified(String expected, Boolean matches) {
      return new LayerReport(digest, mediaType, compressedSize, uncompressedSize, format, tocDigest, entries, chunks,
          contentBytes, tarSplitChecked, annotations, expected, matches);
    }
  }

  record ImageReport(String reference, String manifestDigest, String indexDigest, String platform, List<LayerReport> layers) {}

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    ImageReference ref = ImageReference.parse(reference);
    try (RegistryClients clients = global.clients(config, FetchListener.NONE)) {
      RegistryClient client = clients.client(ref);
      ResolvedImage image = client.resolve(ref, global.platform());
      List<LayerReport> layers = reports(client, image.manifest().layers(), config);
      boolean mismatch = false;
      if (verify) {
        layers = verified(client, image.manifest(), layers, config);
        for (LayerReport l : layers) {
          if (Boolean.FALSE.equals(l.diffIdMatches())) {
            mismatch = true;
            System.err.println("MISMATCH: layer " + l.digest() + " does not decompress to the diff_id " + l.diffId()
                + " its image config gives; containerd will refuse to unpack it");
          }
        }
      }
      ImageReport report = new ImageReport(
          ref.toString(), image.manifest().digest().toString(), image.indexDigest().map(Object::toString).orElse(null),
          global.platform().toString(), layers);
      if (json) {
        System.out.println(new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValueAsString(report));
      } else {
        print(report);
      }
      return mismatch ? 1 : 0;
    }
  }

  /** Each layer downloaded whole (verified against its digest), decompressed, and its digest compared with the config's. */
  private static List<LayerReport> verified(RegistryClient client, ImageManifest manifest, List<LayerReport> layers,
      FlatpullConfig config) throws IOException {
    ImageConfig imageConfig = ImageConfig.parse(client.fetchBlob(manifest.config()), manifest.config().digest());
    Path dir = Files.createTempDirectory("flatpull-inspect");
    try {
      List<LayerReport> out = new ArrayList<>();
      for (int i = 0; i < layers.size(); i++) {
        Descriptor d = manifest.layers().get(i);
        Optional<Digest> expected = imageConfig.diffIdOf(manifest, d.digest());
        Path blob = dir.resolve(d.digest().hex());
        client.downloadBlob(d, blob);
        Digest actual;
        try (var in = Files.newInputStream(blob)) {
          actual = PlainLayerIndexer.diffId(d, in, config.limits());
        } finally {
          Files.deleteIfExists(blob);
        }
        out.add(layers.get(i).verified(expected.map(Digest::toString).orElse(null),
            expected.map(actual::equals).orElse(false)));
      }
      return out;
    } finally {
      Files.deleteIfExists(dir);
    }
  }

  /** TOCs of all layers are requested at once: round trips, not bytes, dominate here. */
  private static List<LayerReport> reports(RegistryClient client, List<Descriptor> layers, FlatpullConfig config)
      throws IOException, InterruptedException {
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, Math.min(8, layers.size())));
    try {
      List<Future<LayerReport>> futures = new ArrayList<>();
      for (Descriptor d : layers) {
        futures.add(pool.submit(() -> report(client, d, config)));
      }
      List<LayerReport> out = new ArrayList<>();
      for (Future<LayerReport> f : futures) {
        try {
          out.add(f.get());
        } catch (ExecutionException e) {
          if (e.getCause() instanceof IOException io) {
            throw io;
          }
          throw new IOException(e.getCause());
        }
      }
      return out;
    } finally {
      pool.shutdownNow();
    }
  }

  private static LayerReport report(RegistryClient client, Descriptor d, FlatpullConfig config) throws IOException {
    LayerFormat format = LayerFormat.of(d);
    Long uncompressed = d.annotation(LayerFormat.ESTARGZ_UNCOMPRESSED_SIZE).map(Long::valueOf).orElse(null);
    if (format == LayerFormat.PLAIN) {
      return new LayerReport(d.digest().toString(), d.mediaType(), d.size(), uncompressed, "plain", null, -1, -1, -1,
          false, d.annotations(), null, null);
    }
    LayerIndex index = format.readToc(d, r -> client.readRange(d.digest(), r), config.limits());
    return new LayerReport(
        d.digest().toString(), d.mediaType(), d.size(), uncompressed, formatName(format),
        index.tocDigest().map(Object::toString).orElse(null), index.entries().size(), index.chunkCount(),
        index.contentSize(), index.tarSplitChecked(), d.annotations(), null, null);
  }

  static String formatName(LayerFormat f) {
    return switch (f) {
      case ESTARGZ -> "estargz";
      case ZSTD_CHUNKED -> "zstd:chunked";
      case PLAIN -> "plain";
    };
  }

  private static void print(ImageReport r) {
    System.out.println("reference:  " + r.reference());
    System.out.println("manifest:   " + r.manifestDigest());
    if (r.indexDigest() != null) {
      System.out.println("index:      " + r.indexDigest() + " (platform " + r.platform() + ")");
    }
    System.out.printf(Locale.ROOT, "%-3s %-19s %-13s %12s %12s %8s %8s %-19s %s%n",
        "#", "digest", "format", "compressed", "uncompressed", "entries", "chunks", "toc", "media type");
    int i = 0;
    for (LayerReport l : r.layers()) {
      System.out.printf(Locale.ROOT, "%-3d %-19s %-13s %12d %12s %8s %8s %-19s %s%n",
          i++, l.digest().substring(0, 19), l.format(), l.compressedSize(),
          l.uncompressedSize() == null ? "-" : l.uncompressedSize().toString(),
          l.entries() < 0 ? "-" : Integer.toString(l.entries()), l.chunks() < 0 ? "-" : Integer.toString(l.chunks()),
          l.tocDigest() == null ? "-" : l.tocDigest().substring(0, 19), l.mediaType());
    }
    i = 0;
    for (LayerReport l : r.layers()) {
      if (l.format().equals("zstd:chunked")) {
        System.out.println("layer " + i + ": " + (l.tarSplitChecked() ? "TOC checked against the layer's tar-split"
            : "no verifiable tar-split: the TOC's metadata is unchecked"));
      }
      if (l.diffIdMatches() != null) {
        System.out.println("layer " + i + ": diff_id " + l.diffId() + (l.diffIdMatches() ? " matches" : " MISMATCH"));
      }
      i++;
    }
  }
}
