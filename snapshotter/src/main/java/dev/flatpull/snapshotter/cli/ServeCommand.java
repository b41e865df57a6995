package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.snapshotter.daemon.SnapshotterDaemon;
import dev.flatpull.snapshotter.store.SqliteNativeLibrary;
import dev.flatpull.snapshotter.warmup.DaemonWarmUp;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

/** {@code flatpull serve}: the containerd snapshotter daemon. */
@Command(name = "serve", mixinStandardHelpOptions = true,
    description = {"Serve containerd's Snapshots API on [snapshotter] socket, as a proxy plugin of type \"snapshot\".",
        "Layers pulled with remote-snapshot labels (ctr-remote image rpull, or CRI with",
        "disable_snapshot_annotations = false) are served lazily by the FUSE manager, a separate process started",
        "here when none runs; it outlives this daemon, so restarting the daemon does not disturb running containers.",
        "Runs until SIGTERM or SIGINT. Needs root, /dev/fuse and overlayfs."})
final class ServeCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    // Before the warm-up, whose own store is the process's first.
    SqliteNativeLibrary.placeUnder(config.root().resolve("native"));
    DaemonWarmUp.beforeServing(config, global.platform());
    SnapshotterDaemon daemon = SnapshotterDaemon.start(config, global.platform(), managerCommand(config));
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        daemon.close();
      } catch (Exception e) {
        System.err.println("flatpull: stopping: " + e.getMessage());
      }
    }, "flatpull-stop"));
    System.err.println("flatpull: serving " + config.snapshotter().socket()
        + (daemon.metricsPort() > 0 ? ", metrics on port " + daemon.metricsPort() : ""));
    daemon.awaitTermination();
    return 0;
  }

  /**
   * This very program, as {@code flatpull fuse-manager} with the same configuration and the configured JVM options
   * ({@code fuse_manager_java_options}; this daemon's own are not passed on). The manager outlives this daemon
   * and loads classes lazily from its jar for as long as it runs, so it runs from a private copy: upgrading or
   * rebuilding the installed jar in place must not pull classes out from under it.
   */
  private List<String> managerCommand(FlatpullConfig config) throws java.io.IOException {
    String classpath = System.getProperty("java.class.path");
    Path jar = Path.of(classpath);
    if (!classpath.contains(":") && classpath.endsWith(".jar") && Files.isRegularFile(jar)) {
      Path dir = Files.createDirectories(config.root().resolve("fuse-manager"));
      Path copy = dir.resolve("flatpull-" + Files.size(jar) + "-" + Files.getLastModifiedTime(jar).toMillis() + ".jar");
      if (!Files.exists(copy)) {
        Path temp = Files.createTempFile(dir, "copy", ".tmp");
        Files.copy(jar, temp, StandardCopyOption.REPLACE_EXISTING);
        Files.move(temp, copy, StandardCopyOption.ATOMIC_MOVE);
      }
      classpath = copy.toString();
    }
    List<String> cmd = new ArrayList<>();
    cmd.add(ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java"));
    cmd.addAll(config.snapshotter().fuseManagerJavaOptions());
    cmd.add("-cp");
    cmd.add(classpath);
    cmd.add(FlatpullCommand.class.getName());
    cmd.add("fuse-manager");
    cmd.addAll(global.asArguments());
    return cmd;
  }
}
