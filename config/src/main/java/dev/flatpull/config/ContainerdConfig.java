package dev.flatpull.config;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.dataformat.toml.TomlMapper;
import java.io.IOException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;

/**
 * What flatpull needs to know of containerd's own configuration ({@code /etc/containerd/config.toml}, version 2):
 * its proxy snapshotter plugins and how its CRI plugin pulls. Read by {@code flatpull doctor}; never written.
 *
 * @param proxySnapshotters {@code [proxy_plugins.NAME]} entries of type {@code snapshot}: name to socket address
 * @param criSnapshotter the snapshotter CRI uses, when set
 * @param criDisableSnapshotAnnotations CRI's {@code disable_snapshot_annotations}; containerd 1.6's default is true,
 *     which keeps the image labels from a remote snapshotter, so that lazy pulling silently does not happen
 * @param criDisabled whether the CRI plugin is in {@code disabled_plugins} (no Kubernetes on this containerd)
 */
public record ContainerdConfig(
    Map<String, String> proxySnapshotters, Optional<String> criSnapshotter, boolean criDisableSnapshotAnnotations,
    boolean criDisabled) {
  private static final String CRI = "io.containerd.grpc.v1.cri";

  public static ContainerdConfig load(Path file) throws ConfigException {
    JsonNode root;
    try {
      root = new TomlMapper().readTree(file.toFile());
    } catch (NoSuchFileException | java.io.FileNotFoundException e) {
      throw new ConfigException(file.toString(), "", "file does not exist");
    } catch (IOException e) {
      throw new ConfigException(file.toString(), "", "is not valid TOML: " + e.getMessage(), e);
    }
    if (root == null) {
      root = new TomlMapper().createObjectNode();
    }
    Map<String, String> proxies = new LinkedHashMap<>();
    JsonNode plugins = root.path("proxy_plugins");
    for (Map.Entry<String, JsonNode> e : plugins.properties()) {
      if ("snapshot".equals(e.getValue().path("type").asText())) {
        proxies.put(e.getKey(), e.getValue().path("address").asText(""));
      }
    }
    JsonNode cri = root.path("plugins").path(CRI).path("containerd");
    String snapshotter = cri.path("snapshotter").asText("");
    JsonNode disable = cri.path("disable_snapshot_annotations");
    // containerd 1.6 defaults to true when the key is absent.
    boolean disabled = disable.isMissingNode() || disable.asBoolean(true);
    boolean criDisabled = false;
    for (JsonNode d : root.path("disabled_plugins")) {
      criDisabled |= d.asText().equals(CRI) || d.asText().equals("cri");
    }
    return new ContainerdConfig(proxies, snapshotter.isEmpty() ? Optional.empty() : Optional.of(snapshotter), disabled,
        criDisabled);
  }
}
