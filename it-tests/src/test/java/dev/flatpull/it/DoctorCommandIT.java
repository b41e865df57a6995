package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code flatpull doctor} on this host, against containerd configurations that do and do not lazy-pull. */
class DoctorCommandIT {
  @TempDir Path dir;

  private Cli.Run doctor(String containerdToml) throws Exception {
    Processes.requireFuse();
    return Cli.inProcess(doctorArguments(containerdToml, dir.resolve("root")).toArray(String[]::new));
  }

  /** {@code doctor} with flatpull's configuration (ROOT, a socket in the test's directory) and containerd's. */
  private List<String> doctorArguments(String containerdToml, Path root) throws Exception {
    Path flatpull = dir.resolve("flatpull.toml");
    Files.writeString(flatpull, "root = \"%s\"\n[snapshotter]\nsocket = \"%s\"\n".formatted(root,
        dir.resolve("flatpull.sock")));
    Path containerd = dir.resolve("containerd.toml");
    Files.writeString(containerd, containerdToml.formatted(dir.resolve("flatpull.sock")));
    return List.of("doctor", "--config", flatpull.toString(), "--containerd-config", containerd.toString());
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
    assertTrue(r.out().contains("ok    libcrypto.so.3 is installed"), r.out());
  }

  @Test
  void noProxyPlugin_isAProblem() throws Exception {
    Cli.Run r = doctor("version = 2\n# %s\n");
    assertEquals(1, r.exitCode(), r.out());
    assertTrue(r.out().contains("FAIL") && r.out().contains("[proxy_plugins.flatpull]"), r.out());
  }

  private static final String GOOD = """
      version = 2
      [proxy_plugins.flatpull]
        type = "snapshot"
        address = "%s"
      [plugins."io.containerd.grpc.v1.cri".containerd]
        snapshotter = "flatpull"
        disable_snapshot_annotations = false
      """;

  /** {@code bin/flatpull doctor} in a mount namespace of its own, as in a pod, made by {@code unshare}. */
  private Processes.Result doctorUnshared(String propagation, Path root) throws Exception {
    Path launcher = Path.of(System.getProperty("flatpull.root", "..")).toAbsolutePath().normalize()
        .resolve("bin/flatpull");
    List<String> cmd = new java.util.ArrayList<>(List.of("unshare", "--mount", "--propagation", propagation,
        launcher.toString()));
    cmd.addAll(doctorArguments(GOOD, root));
    return Processes.run(cmd, 120);
  }

  @Test
  void mountNamespaces_theSameAsContainerds_orPropagatingToIt_passOtherwiseFail() throws Exception {
    Processes.requireFuse();
    Processes.require("unshare");
    try (ContainerdServer containerd = ContainerdServer.start()) {
      Cli.Run same = doctor(GOOD);
      assertTrue(same.out().contains("ok    flatpull and containerd (pid "), same.out());
      assertTrue(same.out().contains("share a mount namespace"), same.out());

      Processes.Result apart = doctorUnshared("private", dir.resolve("root"));
      assertEquals(1, apart.exitCode(), apart.stdout() + apart.stderr());
      assertTrue(apart.stdout().contains("FAIL  containerd (pid ") && apart.stdout().contains("does not propagate"),
          apart.stdout());

      // What mountPropagation: Bidirectional makes: the root is a mount of a peer group containerd's namespace has.
      Path shared = Files.createDirectories(dir.resolve("shared-root"));
      dev.flatpull.core.HostCommand.run("mount", "--bind", shared.toString(), shared.toString());
      try {
        dev.flatpull.core.HostCommand.run("mount", "--make-shared", shared.toString());
        Processes.Result peers = doctorUnshared("unchanged", shared);
        assertEquals(0, peers.exitCode(), peers.stdout() + peers.stderr());
        assertTrue(peers.stdout().contains("is shared (peer group ") && peers.stdout().contains("reach containerd"),
            peers.stdout());
      } finally {
        dev.flatpull.core.HostCommand.run("umount", "-l", shared.toString());
      }
    }
  }

  @Test
  void aGoodConfiguration_passes() throws Exception {
    Cli.Run r = doctor(GOOD);
    assertEquals(0, r.exitCode(), r.out());
    assertTrue(r.out().contains("no problems found"), r.out());
    assertTrue(r.out().contains("warn  flatpull does not answer"), r.out());
  }
}
