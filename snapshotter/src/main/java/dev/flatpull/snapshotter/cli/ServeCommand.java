package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.snapshotter.daemon.SnapshotterDaemon;
import dev.flatpull.snapshotter.store.SqliteNativeLibrary;
import dev.flatpull.snapshotter.warmup.DaemonWarmUp;
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
    ManagerCommandLine manager = ManagerCommandLine.of(config, global);
    SnapshotterDaemon daemon = SnapshotterDaemon.start(config, global.platform(), manager);
    ManagerClassArchive.trainInBackground(config, manager);
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
}
