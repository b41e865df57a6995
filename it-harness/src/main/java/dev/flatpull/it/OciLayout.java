package dev.flatpull.it;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.Platform;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * An OCI image layout on disk of uncompressed layers, for tools that read {@code oci:DIR:TAG} (skopeo). Uncompressed,
 * so that a copy to a registry compresses each layer in the format it is asked for: a gzip layer already in the
 * destination registry would be reused as it is.
 */
public final class OciLayout {
  private static final ObjectMapper JSON = new ObjectMapper();

  private OciLayout() {}

  /** Writes {@code layers} (uncompressed tars, lowest first) as image {@code tag} of a new layout at {@code dir}. */
  public static Path write(Path dir, String tag, List<byte[]> layers) throws IOException {
    Path blobs = Files.createDirectories(dir.resolve("blobs/sha256"));
    ObjectNode config = JSON.createObjectNode().put("architecture", Platform.current().architecture()).put("os", "linux");
    ArrayNode diffIds = config.putObject("rootfs").put("type", "layers").putArray("diff_ids");
    ObjectNode manifest = JSON.createObjectNode().put("schemaVersion", 2).put("mediaType", MediaTypes.OCI_MANIFEST);
    ArrayNode layerDescriptors = JSON.createArrayNode();
    for (byte[] layer : layers) {
      Digest d = blob(blobs, layer);
      diffIds.add(d.toString());
      layerDescriptors.addObject().put("mediaType", MediaTypes.OCI_LAYER).put("digest", d.toString())
          .put("size", layer.length);
    }
    byte[] configBytes = JSON.writeValueAsBytes(config);
    manifest.putObject("config").put("mediaType", MediaTypes.OCI_CONFIG)
        .put("digest", blob(blobs, configBytes).toString()).put("size", configBytes.length);
    manifest.set("layers", layerDescriptors);
    byte[] manifestBytes = JSON.writeValueAsBytes(manifest);
    ObjectNode index = JSON.createObjectNode().put("schemaVersion", 2);
    index.putArray("manifests").addObject().put("mediaType", MediaTypes.OCI_MANIFEST)
        .put("digest", blob(blobs, manifestBytes).toString()).put("size", manifestBytes.length)
        .putObject("annotations").put("org.opencontainers.image.ref.name", tag);
    Files.write(dir.resolve("index.json"), JSON.writeValueAsBytes(index));
    Files.writeString(dir.resolve("oci-layout"), "{\"imageLayoutVersion\":\"1.0.0\"}");
    return dir;
  }

  private static Digest blob(Path blobs, byte[] content) throws IOException {
    Digest d = Digest.sha256(content);
    Files.write(blobs.resolve(d.hex()), content);
    return d;
  }
}
