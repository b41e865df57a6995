package dev.flatpull.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ContainerdConfigTest {
  @TempDir Path dir;

  @Test
  void readsProxySnapshotters_andCrisSettings() throws Exception {
    Path f = dir.resolve("config.toml");
    Files.writeString(f, """
        version = 2
        [proxy_plugins]
          [proxy_plugins.flatpull]
            type = "snapshot"
            address = "/run/flatpull/flatpull.sock"
          [proxy_plugins.other]
            type = "content"
            address = "/run/other.sock"
        [plugins."io.containerd.grpc.v1.cri".containerd]
          snapshotter = "flatpull"
          disable_snapshot_annotations = false
        """);
    ContainerdConfig c = ContainerdConfig.load(f);
    assertEquals(Map.of("flatpull", "/run/flatpull/flatpull.sock"), c.proxySnapshotters());
    assertEquals(Optional.of("flatpull"), c.criSnapshotter());
    assertFalse(c.criDisableSnapshotAnnotations());
  }

  @Test
  void containerd16sDefault_disablesSnapshotAnnotations() throws Exception {
    Path f = dir.resolve("config.toml");
    Files.writeString(f, "version = 2\n");
    ContainerdConfig c = ContainerdConfig.load(f);
    assertTrue(c.criDisableSnapshotAnnotations());
    assertFalse(c.criDisabled());
    Files.writeString(f, "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n");
    assertTrue(ContainerdConfig.load(f).criDisabled());
    assertTrue(c.proxySnapshotters().isEmpty());
  }

  @Test
  void missingOrBrokenFiles_areConfigErrors() throws Exception {
    ConfigException missing = org.junit.jupiter.api.Assertions.assertThrows(ConfigException.class,
        () -> ContainerdConfig.load(dir.resolve("nope.toml")));
    assertTrue(missing.getMessage().contains("does not exist"), missing.getMessage());
    Path f = dir.resolve("bad.toml");
    Files.writeString(f, "[proxy_plugins\n");
    ConfigException bad = org.junit.jupiter.api.Assertions.assertThrows(ConfigException.class, () -> ContainerdConfig.load(f));
    assertTrue(bad.getMessage().contains("not valid TOML"), bad.getMessage());
  }
}
