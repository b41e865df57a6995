package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.manager.metrics.ManagerMeters;
import dev.flatpull.endpoints.metrics.Meters;
import dev.flatpull.endpoints.metrics.MetricsServer;
import dev.flatpull.manager.FuseManagerServer;
import dev.flatpull.manager.LayerServer;
import dev.flatpull.manager.Succession;
import dev.flatpull.manager.client.FuseManagerClient;
import dev.flatpull.snapshotter.warmup.WarmUp;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code flatpull fuse-manager}: the process that serves remote layers; started by {@code flatpull serve}. The
 * process's composition root: its layer server, meters and metrics endpoint are bound here, and its warm-up
 * ({@link WarmUp#whileServing}) starts once it serves.
 */
@Command(name = FuseManagerCommand.NAME, hidden = true, mixinStandardHelpOptions = true,
    description = {"Serve lazily pulled layers over FUSE for the snapshotter daemon, on [snapshotter]",
        "fuse_manager_socket. Started by 'flatpull serve' when none runs, and by 'flatpull replace-manager' in place",
        "of the one that runs. SIGTERM unmounts every layer it serves, which breaks running containers: stop it only",
        "when no container uses flatpull's snapshots."})
final class FuseManagerCommand implements Callable<Integer> {
  /** The command's name, always the first argument of a manager's command line ({@link ManagerCommandLine}). */
  static final String NAME = "fuse-manager";

  @Mixin GlobalOptions global;

  @Option(names = FuseManagerClient.NO_WARM_UP,
      description = "No warm-up while serving (the daemon asks so of a manager that replaces one that exited).")
  boolean noWarmUp;

  @Option(names = FuseManagerClient.REPLACE,
      description = "Take over every mount from the manager serving now, which then exits ('flatpull replace-manager').")
  boolean replace;

  @Option(names = ManagerCommandLine.TRAIN_CLASS_ARCHIVE, hidden = true,
      description = "Run what a manager's start and warm-up load, then exit (under -XX:ArchiveClassesAtExit).")
  boolean trainClassArchive;

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    if (trainClassArchive) {
      ManagerClassArchive.train(config, FlatpullCommand.VERSION);
      return 0;
    }
    Meters meters = new Meters();
    ManagerMeters managerMeters = new ManagerMeters(meters);
    // The page cache lists what it stored before once this manager serves: the listing's CPU is then not on the pause
    // of the containers whose mounts it takes over.
    java.util.concurrent.CompletableFuture<Void> serving = new java.util.concurrent.CompletableFuture<>();
    LayerServer layers = LayerServer.open(config, managerMeters, serving);
    Optional<MetricsServer> endpoint = Optional.empty();
    FuseManagerServer server;
    Optional<Succession> predecessor = replace ? Succession.find(config.snapshotter().fuseManagerSocket())
        : Optional.empty();
    List<Path> takenBeside = List.of();
    try {
      managerMeters.bind(layers);
      layers.handOverMounts(config.snapshotter().fuseDevicesSocket());
      if (predecessor.isPresent()) {
        takenBeside = predecessor.get().takeOver(layers);
        System.err.println("flatpull fuse-manager: serving the " + takenBeside.size() + " mounts of FUSE manager "
            + predecessor.get().pid() + " beside it");
      } else {
        // Before answering: a manager started after one that died serves the running containers' mounts at once.
        int taken = layers.takeOverHeld();
        if (taken > 0) {
          System.err.println("flatpull fuse-manager: took over " + taken + " of the mounts the daemon held");
        }
      }
      server = FuseManagerServer.serve(config, layers, FlatpullCommand.VERSION, predecessor.isPresent());
      serving.complete(null);
    } catch (IOException | RuntimeException e) {
      if (!takenBeside.isEmpty()) {
        // Not closed: that would unmount what the predecessor still serves. What this process read and did not answer
        // waits for the next takeover's resend.
        System.err.println("flatpull fuse-manager: replacing FUSE manager " + predecessor.get().pid() + " failed: " + e);
        Runtime.getRuntime().halt(1);
      }
      layers.close();
      throw e;
    }
    if (predecessor.isPresent()) {
      Succession p = predecessor.get();
      Duration took = p.retire(ProcessHandle.current().pid());
      // What the predecessor read and had not answered when it exited.
      layers.resend(takenBeside);
      System.err.println("flatpull fuse-manager: took over from FUSE manager " + p.pid() + " (version " + p.version()
          + "), which exited " + took.toMillis() + " ms after it was retired");
    }
    try {
      // After the predecessor exited: it held the address.
      if (config.snapshotter().fuseManagerMetricsAddress().isPresent()) {
        endpoint = Optional.of(MetricsServer.start(config.snapshotter().fuseManagerMetricsAddress().get(), meters));
      }
    } catch (IOException | RuntimeException e) {
      server.close();
      throw e;
    }
    Optional<MetricsServer> metrics = endpoint;
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        metrics.ifPresent(MetricsServer::close);
        server.close();
      } catch (Exception e) {
        System.err.println("flatpull fuse-manager: stopping: " + e.getMessage());
      }
    }, "flatpull-fuse-manager-stop"));
    System.err.println("flatpull fuse-manager " + ProcessHandle.current().pid() + ": serving "
        + config.snapshotter().fuseManagerSocket());
    if (!noWarmUp && config.snapshotter().warmUp()) {
      Thread warmUp = new Thread(() -> WarmUp.whileServing(config, FlatpullCommand.VERSION, layers::askedFor),
          "flatpull-warm-up");
      warmUp.setDaemon(true);
      warmUp.start();
    }
    server.awaitTermination();
    return 0;
  }
}
