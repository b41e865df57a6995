package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code flatpull doctor} on this host, against containerd configurations that do and do not lazy-pull. */
class DoctorCommandIT {
  @TempDir Path dir;

  private Cli.Run doctor(String containerdToml) throws Exception {
    Processes.requireFuse();
    Path flatpull = dir.resolve("flatpull.toml");
    Files.writeString(flatpull, "root = \"%s\"\n[snapshotter]\nsocket = \"%s\"\n".formatted(dir.resolve("root"),
        dir.resolve("flatpull.sock")));
    Path containerd = dir.resolve("containerd.toml");
    Files.writeString(containerd, containerdToml.formatted(dir.resolve("flatpull.sock")));
    return Cli.inProcess("doctor", "--config", flatpull.toString(), "--containerd-config", containerd.toString());
  }

  @Test
  void criWithSnapshotAnnotationsDisabled_isTheProblemNamed() throws Exception {
    Cli.Run r = doctor("""
        version = 2
        [proxy_plugins.flatpull]
          type = "snapshot"
          address = "%s"
        [plugins."io.containerd.grpc.v1.cri".containerd]
          snapshotter = "flatpull"
        """);
    assertEquals(1, r.exitCode(), r.out());
    assertTrue(r.out().contains("FAIL  CRI has disable_snapshot_annotations = true"), r.out());
    assertTrue(r.out().contains("ok    /dev/fuse is usable"), r.out());
    assertTrue(r.out().contains("ok    overlayfs is available"), r.out());
  }

  @Test
  void noProxyPlugin_isAProblem() throws Exception {
    Cli.Run r = doctor("version = 2\n# %s\n");
    assertEquals(1, r.exitCode(), r.out());
    assertTrue(r.out().contains("FAIL") && r.out().contains("[proxy_plugins.flatpull]"), r.out());
  }

  @Test
  void aGoodConfiguration_passes() throws Exception {
    Cli.Run r = doctor("""
        version = 2
        [proxy_plugins.flatpull]
          type = "snapshot"
          address = "%s"
        [plugins."io.containerd.grpc.v1.cri".containerd]
          snapshotter = "flatpull"
          disable_snapshot_annotations = false
        """);
    assertEquals(0, r.exitCode(), r.out());
    assertTrue(r.out().contains("no problems found"), r.out());
    assertTrue(r.out().contains("warn  flatpull does not answer"), r.out());
  }
}
