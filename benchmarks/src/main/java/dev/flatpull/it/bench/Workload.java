package dev.flatpull.it.bench;

import dev.flatpull.it.Cli;
import dev.flatpull.it.ContainerdServer;
import dev.flatpull.it.DebianImage;
import dev.flatpull.it.FlatpullDaemon;
import dev.flatpull.it.JvmServiceJar;
import dev.flatpull.trace.probe.Probe;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * A service the cold-start benchmarks start, on an image built from Debian's packages, and what "ready" means for it:
 * its readiness probe, in {@code flatpull record}'s terms, which the benchmark's timing and the recording of its
 * runtime image both use.
 *
 * <ul>
 *   <li>{@code python}: Debian + python3; ready when {@code python3 -c "import json, http.server, ..."} exits 0.
 *   <li>{@code http}: Debian + nginx-light; ready at the first HTTP 200 on port 80 of the host's network.
 *   <li>{@code jvm}: Debian + openjdk-17-jdk-headless running a small HTTP server from a jar ({@link JvmServiceJar})
 *       with the JDK's defaults; ready at its first HTTP 200 on 127.0.0.1:8080.
 *   <li>{@code database}: Debian + postgresql 15 on the cluster its package creates; ready when the host's
 *       {@code pg_isready} (package postgresql-client) passes on 127.0.0.1:5432.
 * </ul>
 *
 * @param name the image's name in the benchmark's registry ({@code bench/NAME}) and its results
 * @param command the container's command
 * @param probe the readiness probe ({@link Probe#parse})
 * @param changedByNextVersion a file the service reads at start, which its next version changes
 *     ({@link #nextVersionOf})
 */
record Workload(String name, List<String> command, String probe, String changedByNextVersion) {
  static final List<String> NAMES = List.of("python", "http", "jvm", "database");

  static Workload of(String name) {
    return switch (name) {
      case "python" -> new Workload(name, List.of("/usr/bin/python3", "-c",
          "import json, http.server, email.parser, urllib.request, decimal, logging, argparse"), "exit",
          "usr/lib/python3.11/argparse.py");
      case "http" -> new Workload(name, List.of("/usr/sbin/nginx", "-g", "daemon off;"), "http://127.0.0.1:80/",
          "etc/nginx/nginx.conf");
      case "jvm" -> new Workload(name, JvmServiceJar.COMMAND, "http://127.0.0.1:8080/", JvmServiceJar.PATH);
      case "database" -> new Workload(name, List.of(DebianImage.POSTGRES_START),
          "exec:pg_isready -q -h 127.0.0.1 -p 5432 -t 2", "etc/postgresql/15/main/postgresql.conf");
      default -> throw new IllegalArgumentException("unknown image " + name + ": one of " + String.join(", ", NAMES));
    };
  }

  /** The image's root file system, built from Debian's packages on first use. */
  Path rootfs() throws IOException, InterruptedException {
    return switch (name) {
      case "python" -> DebianImage.pythonRootfs();
      case "http" -> DebianImage.nginxRootfs();
      case "jvm" -> DebianImage.jvmRootfs();
      default -> DebianImage.postgresRootfs();
    };
  }

  /**
   * {@link #changedByNextVersion}'s content in the next version: the jar rebuilt with another version; any other file
   * with a comment appended (python's {@code argparse.py}, whose compiled module is then stale; the configurations).
   */
  byte[] nextVersionOf(byte[] content) throws IOException {
    if (name.equals("jvm")) {
      return JvmServiceJar.build("2");
    }
    byte[] comment = "\n# the next version\n".getBytes(StandardCharsets.US_ASCII);
    byte[] appended = Arrays.copyOf(content, content.length + comment.length);
    System.arraycopy(comment, 0, appended, content.length, comment.length);
    return appended;
  }

  /** Whether readiness is the command's exit (else the service keeps running and a probe asks it). */
  private boolean exits() {
    return probe.equals("exit");
  }

  /** Creates the container: its root file system's snapshot (on the image's layers) and its spec. */
  void create(ContainerdServer containerd, String snapshotter, String ref, String id)
      throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>(List.of("container", "create", "--snapshotter", snapshotter));
    if (!exits()) {
      cmd.add("--net-host");
    }
    cmd.addAll(List.of(ref, id));
    if (exits()) {
      // ctr's create has a -c flag of its own (a spec file), which python's -c would be taken for without "--"; but
      // after a boolean flag such as --net-host, ctr 1.6 takes "--" for the container's id (docs/development.md).
      cmd.add("--");
    }
    cmd.addAll(command);
    containerd.ctrOk(cmd.toArray(String[]::new));
  }

  /** Starts the task and returns at readiness: the command's exit with status 0, or its probe's first success. */
  void start(ContainerdServer containerd, String id) throws IOException, InterruptedException {
    if (exits()) {
      containerd.ctrOk("task", "start", id);
      return;
    }
    containerd.ctrOk("task", "start", "-d", id);
    Probe ready = Probe.parse(probe);
    long deadline = System.nanoTime() + Duration.ofSeconds(120).toNanos();
    // A network or exec probe does not look at the container (only exit and log probes do).
    while (!ready.check(null, Duration.ofSeconds(2))) {
      if (System.nanoTime() > deadline) {
        throw new IOException(name + " not ready by " + probe + " within 120 s");
      }
      Thread.sleep(20);
    }
  }

  /** Records the service (as the benchmarks start it) on a node of its own, and pushes its runtime image. */
  void recordRuntimeImage(String ref) throws Exception {
    try (FlatpullDaemon d = FlatpullDaemon.start("");
        ContainerdServer c = ContainerdServer.withFlatpull(d.socket())) {
      List<String> args = new ArrayList<>(List.of("record", "--config", d.config().toString(), "--plain-http",
          "--containerd-address", c.socket().toString(), "--namespace", ContainerdServer.NAMESPACE,
          "--out", Files.createTempFile("bench", ".fptrace").toString(), "--push-runtime-image", "--probe",
          probe, ref, "--"));
      args.addAll(command);
      Cli.Run r = Cli.inProcess(args.toArray(String[]::new));
      if (r.exitCode() != 0) {
        throw new IOException("recording " + name + " failed: " + r.stderr());
      }
    }
  }
}
