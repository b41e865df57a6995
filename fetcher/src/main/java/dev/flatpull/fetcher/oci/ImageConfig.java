package dev.flatpull.fetcher.oci;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.core.Digest;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * What flatpull reads of an image's config: {@code rootfs.diff_ids}, the digests of the layers' uncompressed tar
 * streams, in the manifest's layer order (what containerd checks each unpacked layer against).
 */
public record ImageConfig(List<Digest> diffIds) {
  private static final ObjectMapper JSON = new ObjectMapper();

  public ImageConfig {
    diffIds = List.copyOf(diffIds);
  }

  /** Parses a config blob already verified against its descriptor. */
  public static ImageConfig parse(byte[] json, Digest digest) throws ManifestFormatException {
    JsonNode root;
    try {
      root = JSON.readTree(json);
    } catch (IOException e) {
      throw new ManifestFormatException("image config " + digest + " is not JSON: " + e.getMessage());
    }
    JsonNode ids = root == null ? null : root.path("rootfs").path("diff_ids");
    if (ids == null || !ids.isArray()) {
      throw new ManifestFormatException("image config " + digest + " has no rootfs.diff_ids");
    }
    List<Digest> out = new ArrayList<>();
    for (JsonNode id : ids) {
      try {
        out.add(Digest.parse(id.asText()));
      } catch (IllegalArgumentException e) {
        throw new ManifestFormatException("image config " + digest + ": diff_id " + id + ": " + e.getMessage());
      }
    }
    return new ImageConfig(out);
  }

  /** The diff_id of the manifest's layer {@code layer}, when the config lists one for each layer. */
  public java.util.Optional<Digest> diffIdOf(ImageManifest manifest, Digest layer) {
    List<Descriptor> layers = manifest.layers();
    if (layers.size() != diffIds.size()) {
      return java.util.Optional.empty();
    }
    for (int i = 0; i < layers.size(); i++) {
      if (layers.get(i).digest().equals(layer)) {
        return java.util.Optional.of(diffIds.get(i));
      }
    }
    return java.util.Optional.empty();
  }
}
