package dev.flatpull.it.bench;

import dev.flatpull.it.Cli;
import dev.flatpull.it.ContainerdServer;
import dev.flatpull.it.FlatpullDaemon;
import dev.flatpull.it.Processes;
import java.io.IOException;
import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * The services the cold-start benchmarks start, and what "ready" means for each: {@code python} (Debian + python3;
 * ready when {@code python3 -c "import json, http.server, ..."} exits with status 0) and {@code http} (Debian +
 * nginx-light; ready at the first HTTP 200 on port 80 of the host's network).
 */
final class Workload {
  static final List<String> PYTHON = List.of("/usr/bin/python3", "-c",
      "import json, http.server, email.parser, urllib.request, decimal, logging, argparse");
  static final List<String> NGINX = List.of("/usr/sbin/nginx", "-g", "daemon off;");

  private Workload() {}

  static List<String> command(String image) {
    return image.equals("python") ? PYTHON : NGINX;
  }

  /** Creates the container: its root file system's snapshot (on the image's layers) and its spec. */
  static void create(ContainerdServer containerd, String snapshotter, String image, String ref, String id)
      throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>(List.of("container", "create", "--snapshotter", snapshotter));
    if (image.equals("http")) {
      cmd.add("--net-host");
    }
    cmd.addAll(List.of(ref, id));
    if (image.equals("python")) {
      // ctr's create has a -c flag of its own (a spec file), which python's -c would be taken for without "--"; but
      // after a boolean flag such as --net-host, ctr 1.6 takes "--" for the container's id (docs/development.md).
      cmd.add("--");
    }
    cmd.addAll(command(image));
    containerd.ctrOk(cmd.toArray(String[]::new));
  }

  /** Starts the task and returns at readiness: python's exit (status 0), nginx's first HTTP 200. */
  static void start(ContainerdServer containerd, String image, String id) throws IOException, InterruptedException {
    if (image.equals("python")) {
      containerd.ctrOk("task", "start", id);
    } else {
      containerd.ctrOk("task", "start", "-d", id);
      Processes.awaitHttp200("http://127.0.0.1:80/", Duration.ofSeconds(120));
    }
  }

  /** Records the image's service (as the benchmarks start it) on a node of its own, and pushes its runtime image. */
  static void recordRuntimeImage(String image, String ref) throws Exception {
    try (FlatpullDaemon d = FlatpullDaemon.start("");
        ContainerdServer c = ContainerdServer.withFlatpull(d.socket())) {
      List<String> args = new ArrayList<>(List.of("record", "--config", d.config().toString(), "--plain-http",
          "--containerd-address", c.socket().toString(), "--namespace", ContainerdServer.NAMESPACE,
          "--out", Files.createTempFile("bench", ".fptrace").toString(), "--push-runtime-image", "--probe",
          image.equals("python") ? "exit" : "http://127.0.0.1:80/", ref, "--"));
      args.addAll(command(image));
      Cli.Run r = Cli.inProcess(args.toArray(String[]::new));
      if (r.exitCode() != 0) {
        throw new IOException("recording " + image + " failed: " + r.stderr());
      }
    }
  }
}
