package dev.flatpull.fetcher.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.core.Progress;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.PlainLayerIndexer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ManifestFormatException;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClient.ResolvedImage;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Converts an image to eStargz or zstd:chunked: each layer (of any compression) is fetched whole and verified,
 * rewritten by {@link LazyLayerWriter}, and pushed with its TOC annotations; the config's {@code rootfs.diff_ids} are
 * replaced by the new layers' diffIDs (the tar streams change: TOC entry, landmarks, order) and an OCI manifest is
 * pushed to the destination.
 */
public final class ImageConverter {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** On a converted manifest: the manifest it was converted from. */
  public static final String SOURCE_MANIFEST = "dev.flatpull.converted-from";
  /**
   * On a converted manifest: the compressed size of the source's layers, so that what is built from the converted
   * image (a runtime image) can be compared with what the user started from, not with the conversion.
   */
  public static final String SOURCE_LAYERS_SIZE = "dev.flatpull.converted-from.layers-size";

  /** What to produce. */
  public record Options(LayerFormat format, long chunkSize, List<String> prioritized, int level, Platform platform) {
    public Options {
      prioritized = List.copyOf(prioritized);
    }
  }

  /** What was pushed. */
  public record Result(ImageReference destination, Digest manifestDigest, List<Descriptor> layers, List<ConvertedLayer> converted) {}

  private final FetchLimits limits;
  private final Path workDir;
  private final Progress progress;

  /**
   * @param workDir where layers are staged while converting; files are removed as each layer is pushed
   * @param progress is told each step, and the bytes done of each layer's download, decompression and conversion
   */
  public ImageConverter(FetchLimits limits, Path workDir, Progress progress) {
    this.limits = limits;
    this.workDir = workDir;
    this.progress = progress;
  }

  public Result convert(
      RegistryClient source, ImageReference src, RegistryClient destination, ImageReference dst, Options options)
      throws IOException {
    Files.createDirectories(workDir);
    ResolvedImage image = source.resolve(src, options.platform());
    progress.step("resolved " + src + " to manifest " + image.manifest().digest() + " ("
        + image.manifest().layers().size() + " layers)");
    byte[] configBytes = source.fetchBlob(image.manifest().config());
    JsonNode configTree = JSON.readTree(configBytes);
    if (!(configTree instanceof ObjectNode config)) {
      throw new ManifestFormatException("image config " + image.manifest().config().digest() + " is not a JSON object");
    }
    List<Descriptor> layers = new ArrayList<>();
    List<ConvertedLayer> converted = new ArrayList<>();
    ArrayNode diffIds = JSON.createArrayNode();
    int n = image.manifest().layers().size();
    for (int i = 0; i < n; i++) {
      Descriptor layer = image.manifest().layers().get(i);
      String step = "layer " + (i + 1) + "/" + n + " " + layer.digest().shortHex();
      Path blob = workDir.resolve(layer.digest().hex() + ".src");
      Path tar = workDir.resolve(layer.digest().hex() + ".tar");
      Path out = workDir.resolve(layer.digest().hex() + ".out");
      try {
        progress.step(step + ": fetching " + mib(layer.size()));
        String fetching = step + ": fetching";
        source.downloadBlob(layer, blob, got -> progress.bytes(fetching, got, layer.size()));
        String unpacking = step + ": decompressing";
        try (InputStream in = PlainLayerIndexer.decompressed(layer, MediaTypes.layerCompression(layer.mediaType()),
                new CountingInputStream(Files.newInputStream(blob), read -> progress.bytes(unpacking, read, layer.size())),
                limits);
            OutputStream o = Files.newOutputStream(tar)) {
          in.transferTo(o);
        }
        Files.delete(blob);
        String converting = step + ": converting";
        ConvertedLayer c = new LazyLayerWriter(options.format(), options.chunkSize(), options.level())
            .write(tar, out, options.prioritized(), (done, total) -> progress.bytes(converting, done, total));
        Descriptor d = c.descriptor();
        progress.step(step + ": " + c.entries() + " entries, " + c.chunks() + " chunks, " + mib(c.size())
            + " as " + options.format().name().toLowerCase(java.util.Locale.ROOT) + "; pushing " + c.digest().shortHex());
        destination.pushBlob(d, out);
        layers.add(d);
        converted.add(c);
        diffIds.add(c.diffId().toString());
      } finally {
        Files.deleteIfExists(blob);
        Files.deleteIfExists(tar);
        Files.deleteIfExists(out);
      }
    }
    ObjectNode rootfs = config.putObject("rootfs");
    rootfs.put("type", "layers");
    rootfs.set("diff_ids", diffIds);
    byte[] newConfig = JSON.writeValueAsBytes(config);
    Descriptor configDescriptor = new Descriptor(MediaTypes.OCI_CONFIG, Digest.sha256(newConfig), newConfig.length, java.util.Map.of());
    destination.pushBlob(configDescriptor, newConfig);
    // A conversion of a conversion still names what the user started from.
    String sourceSize = image.manifest().annotations().getOrDefault(SOURCE_LAYERS_SIZE,
        Long.toString(image.manifest().layers().stream().mapToLong(Descriptor::size).sum()));
    java.util.Map<String, String> annotations = java.util.Map.of(
        SOURCE_MANIFEST, image.manifest().annotations().getOrDefault(SOURCE_MANIFEST,
            image.manifest().digest().toString()),
        SOURCE_LAYERS_SIZE, sourceSize);
    byte[] manifest = OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST, configDescriptor, layers, annotations);
    Digest digest = destination.pushManifest(dst.manifestReference(), MediaTypes.OCI_MANIFEST, manifest);
    progress.step("pushed " + dst + " as " + digest);
    return new Result(dst, digest, layers, converted);
  }

  static String mib(long bytes) {
    return String.format(java.util.Locale.ROOT, "%.1f MiB", bytes / 1048576.0);
  }
}
