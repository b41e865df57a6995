package dev.flatpull.it;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;

/** A real containerd with its own root, state and socket, driven through {@code ctr-remote}. One per test class. */
public final class ContainerdServer implements AutoCloseable {
  /** The containerd namespace the tests work in. */
  /**
   * The namespace of this JVM's containers: containerd names a container's cgroup after its namespace and id, and the
   * integration tests run in two JVMs at once, each with its own containerd, whose containers' ids may be alike.
   */
  public static final String NAMESPACE = "flatpull-it-" + ProcessHandle.current().pid();

  private final Process process;
  private final Path dir;
  private final Path socket;
  private final Path ctr;

  private ContainerdServer(Process process, Path dir, Path socket, Path ctr) {
    this.process = process;
    this.dir = dir;
    this.socket = socket;
    this.ctr = ctr;
  }

  public static ContainerdServer start() throws IOException, InterruptedException {
    return start("");
  }

  /** Starts containerd with flatpull's socket as proxy snapshotter plugin "flatpull". */
  public static ContainerdServer withFlatpull(Path flatpullSocket) throws IOException, InterruptedException {
    return withProxySnapshotter("flatpull", flatpullSocket);
  }

  /** Starts containerd with the snapshotter at {@code socket} as proxy snapshotter plugin {@code name}. */
  public static ContainerdServer withProxySnapshotter(String name, Path socket)
      throws IOException, InterruptedException {
    return start("""
        [proxy_plugins]
          [proxy_plugins.%s]
            type = "snapshot"
            address = "%s"
        """.formatted(name, socket));
  }

  /**
   * Starts containerd with its CRI plugin (what the kubelet talks to) on, using flatpull as proxy snapshotter
   * "flatpull" for CRI's pulls with image labels passed ({@code disable_snapshot_annotations = false}), and
   * {@code registry} ({@code HOST:PORT}) reached over plain HTTP through a {@code hosts.toml}. CRI works in the
   * {@code k8s.io} namespace. No CNI is configured: images pull, pod sandboxes would not start.
   */
  public static ContainerdServer withFlatpullForCri(Path flatpullSocket, String registry)
      throws IOException, InterruptedException {
    Path dir = Files.createTempDirectory("flatpull-containerd");
    Path hosts = Files.createDirectories(dir.resolve("certs.d").resolve(registry));
    Files.writeString(hosts.resolve("hosts.toml"), "server = \"http://%s\"\n".formatted(registry));
    return start(dir, false, """
        [proxy_plugins]
          [proxy_plugins.flatpull]
            type = "snapshot"
            address = "%s"
        [plugins."io.containerd.grpc.v1.cri"]
          [plugins."io.containerd.grpc.v1.cri".containerd]
            snapshotter = "flatpull"
            disable_snapshot_annotations = false
          [plugins."io.containerd.grpc.v1.cri".registry]
            config_path = "%s"
        """.formatted(flatpullSocket, dir.resolve("certs.d")));
  }

  private static ContainerdServer start(String extraToml) throws IOException, InterruptedException {
    return start(Files.createTempDirectory("flatpull-containerd"), true, extraToml);
  }

  private static ContainerdServer start(Path dir, boolean disableCri, String extraToml)
      throws IOException, InterruptedException {
    Path containerd = Processes.require("containerd");
    Path ctr = Processes.require("ctr-remote");
    Path socket = dir.resolve("containerd.sock");
    Path config = dir.resolve("config.toml");
    Files.writeString(config, """
        version = 2
        root = "%s"
        state = "%s"
        %s
        [grpc]
          address = "%s"
        %s
        """.formatted(dir.resolve("root"), dir.resolve("state"),
        disableCri ? "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]" : "", socket, extraToml));
    Process p = new ProcessBuilder(containerd.toString(), "--config", config.toString())
        .redirectErrorStream(true).redirectOutput(dir.resolve("containerd.log").toFile()).start();
    ContainerdServer server = new ContainerdServer(p, dir, socket, ctr);
    Instant deadline = Instant.now().plus(Duration.ofSeconds(30));
    while (Instant.now().isBefore(deadline)) {
      if (!p.isAlive()) {
        throw new IOException("containerd exited: " + Files.readString(dir.resolve("containerd.log")));
      }
      if (Files.exists(socket) && server.ctr("version").exitCode() == 0) {
        return server;
      }
      Thread.sleep(200);
    }
    server.close0();
    throw new IOException("containerd did not start within 30 s");
  }

  /** Runs {@code ctr-remote -a SOCKET --namespace NAMESPACE ARGS}, in this JVM's namespace. */
  public Processes.Result ctr(String... args) throws IOException, InterruptedException {
    return ctrIn(NAMESPACE, args);
  }

  /** Runs {@code ctr-remote -a SOCKET --namespace NAMESPACE ARGS}. */
  public Processes.Result ctrIn(String namespace, String... args) throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>(List.of(ctr.toString(), "-a", socket.toString(), "--namespace", namespace));
    cmd.addAll(List.of(args));
    return Processes.run(cmd, 300);
  }

  /** Like {@link #ctr} but fails on a non-zero exit. */
  public Processes.Result ctrOk(String... args) throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>(List.of("ctr-remote"));
    cmd.addAll(List.of(args));
    return ctr(args).orThrow(cmd);
  }

  /**
   * {@link #ctrOk} for a {@code run --rm} of a container whose command always prints: one that exits 0 having printed
   * nothing at all is run once more. containerd 1.6's ctr now and then returned such a container's success without
   * its output (twice in a few hundred runs), which a test reading the output would take for a failure of its own.
   * Only for containers certain to print: one that prints nothing would run twice.
   */
  public Processes.Result ctrPrinting(String... args) throws IOException, InterruptedException {
    Processes.Result r = ctrOk(args);
    if (r.stdout().isEmpty() && r.stderr().isEmpty()) {
      System.out.println("ctr run printed nothing; running it once more: " + String.join(" ", args));
      r = ctrOk(args);
    }
    return r;
  }

  /** Kills container {@code id}'s task if it runs, and deletes the task and the container; absent ones are fine. */
  public void removeContainer(String id) throws IOException, InterruptedException {
    ctr("task", "kill", "-s", "SIGKILL", id);
    for (int i = 0; i < 50 && ctr("task", "delete", id).exitCode() != 0
        && ctr("task", "ls", "-q").stdout().lines().anyMatch(id::equals); i++) {
      Thread.sleep(100);
    }
    ctr("container", "delete", id);
  }

  public Path socket() {
    return socket;
  }

  public Path directory() {
    return dir;
  }

  public String log() throws IOException {
    return Files.readString(dir.resolve("containerd.log"));
  }

  private void close0() throws IOException {
    Processes.stop(process);
    Processes.deleteTree(dir);
  }

  @Override
  public void close() throws IOException {
    close0();
  }
}
