package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.ConfigException;
import dev.flatpull.config.ContainerdConfig;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.snapshotter.grpc.SnapshotsProbe;
import dev.flatpull.snapshotter.overlay.HostMounts;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/** {@code flatpull doctor}: why lazy pulling would not happen on this host. */
@Command(name = "doctor", mixinStandardHelpOptions = true,
    description = {"Check that this host can run flatpull and that containerd is configured to use it: root,",
        "/dev/fuse, fusermount, libfuse2, overlayfs, containerd's proxy plugin for flatpull's socket and, for",
        "Kubernetes, CRI's disable_snapshot_annotations = false (with its default, true, CRI passes no image labels",
        "and lazy pulling silently does not happen); that the mounts it makes reach containerd (the same mount",
        "namespace, or a shared mount: a pod's hostPath needs mountPropagation: Bidirectional), and what a pod",
        "restart would do. Exit status 0 when nothing failed, 1 otherwise."})
final class DoctorCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Option(names = "--containerd-config", paramLabel = "FILE", description = "containerd's configuration file.")
  Path containerdConfig = Path.of("/etc/containerd/config.toml");

  private int failures;
  private PrintStream out = System.out;

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    check(readFirst(Path.of("/proc/self/status"), "Uid:").map(l -> l.split("\\s+")[1].equals("0")).orElse(false),
        "running as root", "flatpull mounts file systems: run it as root");
    Path fuse = Path.of("/dev/fuse");
    check(Files.exists(fuse) && Files.isReadable(fuse) && Files.isWritable(fuse), "/dev/fuse is usable",
        "/dev/fuse is missing or not accessible (modprobe fuse; in a container, pass --device /dev/fuse)");
    check(onPath("fusermount"), "fusermount is installed", "fusermount is missing (Debian: apt-get install fuse3)");
    check(library("libfuse.so.2"), "libfuse.so.2 is installed",
        "libfuse.so.2 is missing (Debian: apt-get install libfuse2)");
    // Not required: without it the FUSE manager verifies with the JDK's SHA-256, slow until the JIT's C2 compiled it.
    out.println(library("libcrypto.so.3") ? "ok    libcrypto.so.3 is installed (SHA-256 at the CPU's speed)"
        : "warn  libcrypto.so.3 is missing: a FUSE manager's first starts verify content more slowly "
            + "(Debian: apt-get install libssl3)");
    check(readFirst(Path.of("/proc/filesystems"), "overlay").isPresent(), "overlayfs is available",
        "overlayfs is not in /proc/filesystems (modprobe overlay)");
    containerd(config.snapshotter().socket());
    mountNamespace(config.root());
    try {
      long n = SnapshotsProbe.count(config.snapshotter().socket());
      out.println("ok    flatpull answers on " + config.snapshotter().socket() + " (" + n + " snapshots)");
    } catch (IOException e) {
      out.println("warn  flatpull does not answer on " + config.snapshotter().socket() + " (is 'flatpull serve' running?)");
    }
    out.println(failures == 0 ? "no problems found" : failures + " problem" + (failures == 1 ? "" : "s") + " found");
    return failures == 0 ? 0 : 1;
  }

  private void containerd(Path socket) {
    ContainerdConfig c;
    try {
      c = ContainerdConfig.load(containerdConfig);
    } catch (ConfigException e) {
      fail("containerd's configuration: " + e.getMessage());
      return;
    }
    Optional<String> name = c.proxySnapshotters().entrySet().stream()
        .filter(e -> Path.of(e.getValue()).toAbsolutePath().normalize().equals(socket.toAbsolutePath().normalize()))
        .map(Map.Entry::getKey).findFirst();
    if (name.isEmpty()) {
      fail(containerdConfig + " has no [proxy_plugins.flatpull] with type = \"snapshot\" and address = \"" + socket
          + "\"");
      return;
    }
    out.println("ok    containerd has proxy snapshotter \"" + name.get() + "\" at " + socket);
    if (c.criDisabled()) {
      out.println("ok    CRI is disabled: containers come from ctr / ctr-remote (rpull passes the image labels itself)");
    } else if (c.criSnapshotter().filter(name.get()::equals).isEmpty()) {
      out.println("warn  CRI (Kubernetes) uses snapshotter \"" + c.criSnapshotter().orElse("overlayfs")
          + "\", not \"" + name.get() + "\": pods will not be pulled lazily (ctr-remote rpull still is)");
    } else if (c.criDisableSnapshotAnnotations()) {
      fail("CRI has disable_snapshot_annotations = true (containerd 1.6's default): it passes no image labels, so"
          + " lazy pulling silently does not happen; set it to false in [plugins.\"io.containerd.grpc.v1.cri\".containerd]");
    } else {
      out.println("ok    CRI uses \"" + name.get() + "\" and passes image labels (disable_snapshot_annotations = false)");
    }
  }

  /**
   * containerd mounts the overlays of the snapshots flatpull prepares, over FUSE mounts flatpull makes under its root:
   * they must be visible in containerd's mount namespace. In the same namespace they are; in another one (a pod) only
   * when the root is a shared mount, which is what Kubernetes' {@code mountPropagation: Bidirectional} makes.
   */
  private void mountNamespace(Path root) {
    if (System.getenv("KUBERNETES_SERVICE_HOST") != null) {
      out.println("warn  running in a Kubernetes pod: the FUSE manager ends with the pod, and containers whose layers"
          + " it serves lose their root file systems; drain the node before this pod restarts (docs/kubernetes.md)");
    }
    HostMounts.Propagation propagation;
    try {
      propagation = HostMounts.propagationOf(root);
    } catch (IOException e) {
      fail("cannot read /proc/self/mountinfo: " + e.getMessage());
      return;
    }
    Optional<ProcessHandle> containerd = ProcessHandle.allProcesses()
        .filter(p -> p.info().command().map(c -> Path.of(c).getFileName().toString().equals("containerd")).orElse(false))
        .findFirst();
    String advice = "; in Kubernetes give its hostPath volume mountPropagation: Bidirectional (docs/kubernetes.md),"
        + " elsewhere mount --make-rshared it in containerd's namespace";
    if (containerd.isPresent()) {
      long pid = containerd.get().pid();
      Optional<Path> ours = readLink(Path.of("/proc/self/ns/mnt"));
      Optional<Path> theirs = readLink(Path.of("/proc/" + pid + "/ns/mnt"));
      if (ours.isPresent() && ours.equals(theirs)) {
        out.println("ok    flatpull and containerd (pid " + pid + ") share a mount namespace");
        return;
      }
      boolean reaches;
      try {
        reaches = HostMounts.reaches(propagation.peerGroup(), Files.readAllLines(Path.of("/proc/" + pid + "/mountinfo")));
      } catch (IOException e) {
        fail("containerd (pid " + pid + ") runs in another mount namespace, whose mount table is unreadable: "
            + e.getMessage());
        return;
      }
      check(reaches, root + " is " + propagation + " with containerd's mount namespace (pid " + pid
          + "): the mounts flatpull makes there reach containerd",
          "containerd (pid " + pid + ") runs in another mount namespace, and " + root + " (" + propagation
              + ") does not propagate to it: containerd will not see the mounts flatpull makes there" + advice);
    } else if (propagation.shared()) {
      out.println("ok    " + root + " is " + propagation + " (containerd's process is not visible from here to check"
          + " that it is in the same group)");
    } else {
      out.println("warn  containerd's process is not visible from here (not running, or a pod without hostPID), and "
          + root + " is a " + propagation + " mount: if containerd runs in another mount namespace it will not see the"
          + " mounts flatpull makes there" + advice);
    }
  }

  private static Optional<Path> readLink(Path link) {
    try {
      return Optional.of(Files.readSymbolicLink(link));
    } catch (IOException | UnsupportedOperationException e) {
      return Optional.empty();
    }
  }

  private void check(boolean ok, String good, String bad) {
    if (ok) {
      out.println("ok    " + good);
    } else {
      fail(bad);
    }
  }

  private void fail(String what) {
    failures++;
    out.println("FAIL  " + what);
  }

  private static boolean onPath(String program) {
    String path = Optional.ofNullable(System.getenv("PATH")).orElse("/usr/sbin:/usr/bin:/sbin:/bin");
    for (String dir : path.split(":")) {
      if (!dir.isEmpty() && Files.isExecutable(Path.of(dir, program))) {
        return true;
      }
    }
    return false;
  }

  private static boolean library(String soname) {
    for (String dir : new String[] {"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"}) {
      if (Files.exists(Path.of(dir, soname))) {
        return true;
      }
    }
    return false;
  }

  private static Optional<String> readFirst(Path file, String containing) {
    try {
      return Files.readAllLines(file).stream().filter(l -> l.contains(containing)).findFirst();
    } catch (IOException e) {
      return Optional.empty();
    }
  }
}
