package dev.flatpull.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPOutputStream;

/** Pushes images to a plain-HTTP test registry: from uncompressed tar layers (gzip-compressed or not), or ready blobs. */
public final class ImagePusher {
  /** One layer: its tar, and whether to push it gzip-compressed. */
  public record Layer(byte[] tar, boolean gzip) {}

  private ImagePusher() {}

  /** A layer blob as pushed: its bytes, the descriptor the manifest lists, and the digest of its uncompressed tar. */
  public record Blob(byte[] bytes, Descriptor descriptor, Digest diffId) {}

  /** Pushes the layers, a config whose diff_ids match them, and a manifest tagged {@code ref}'s tag. */
  public static void push(ImageReference ref, List<Layer> layers) throws IOException {
    List<Blob> blobs = new ArrayList<>();
    for (Layer l : layers) {
      byte[] blob = l.gzip() ? gzip(l.tar()) : l.tar();
      blobs.add(new Blob(blob, new Descriptor(l.gzip() ? MediaTypes.OCI_LAYER_GZIP : MediaTypes.OCI_LAYER,
          Digest.sha256(blob), blob.length, Map.of()), Digest.sha256(l.tar())));
    }
    pushBlobs(ref, blobs);
  }

  /**
   * Pushes ready-made layer blobs as they are (annotations included, hostile ones too), a config listing their
   * diff_ids, and a manifest tagged {@code ref}'s tag; returns the manifest's digest.
   */
  public static Digest pushBlobs(ImageReference ref, List<Blob> blobs) throws IOException {
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    try (RegistryClients clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE,
        Sleeper.SYSTEM, InstantSource.system())) {
      RegistryClient client = clients.client(ref);
      ObjectMapper json = new ObjectMapper();
      ObjectNode cfg = json.createObjectNode();
      cfg.put("architecture", Platform.current().architecture());
      cfg.put("os", "linux");
      cfg.putObject("config").putArray("Cmd").add("/bin/sh");
      ObjectNode rootfs = cfg.putObject("rootfs");
      rootfs.put("type", "layers");
      ArrayNode diffIds = rootfs.putArray("diff_ids");
      List<Descriptor> descriptors = new ArrayList<>();
      for (Blob b : blobs) {
        client.pushBlob(b.descriptor(), b.bytes());
        descriptors.add(b.descriptor());
        diffIds.add(b.diffId().toString());
      }
      byte[] cfgBytes = json.writeValueAsBytes(cfg);
      Descriptor c = new Descriptor(MediaTypes.OCI_CONFIG, Digest.sha256(cfgBytes), cfgBytes.length, Map.of());
      client.pushBlob(c, cfgBytes);
      return client.pushManifest(ref.tag().orElseThrow(), MediaTypes.OCI_MANIFEST,
          OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST, c, descriptors, Map.of()));
    }
  }

  static byte[] gzip(byte[] data) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (GZIPOutputStream g = new GZIPOutputStream(out)) {
      g.write(data);
    }
    return out.toByteArray();
  }
}
