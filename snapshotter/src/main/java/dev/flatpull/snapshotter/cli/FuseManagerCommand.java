package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.manager.metrics.ManagerMeters;
import dev.flatpull.endpoints.metrics.Meters;
import dev.flatpull.endpoints.metrics.MetricsServer;
import dev.flatpull.manager.FuseManagerServer;
import dev.flatpull.manager.LayerServer;
import dev.flatpull.manager.client.FuseManagerClient;
import dev.flatpull.snapshotter.warmup.WarmUp;
import java.io.IOException;
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
@Command(name = "fuse-manager", hidden = true, mixinStandardHelpOptions = true,
    description = {"Serve lazily pulled layers over FUSE for the snapshotter daemon, on [snapshotter]",
        "fuse_manager_socket. Started by 'flatpull serve' when none runs. SIGTERM unmounts every layer it serves,",
        "which breaks running containers: stop it only when no container uses flatpull's snapshots."})
final class FuseManagerCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Option(names = FuseManagerClient.NO_WARM_UP,
      description = "No warm-up while serving (the daemon asks so of a manager that replaces one that exited).")
  boolean noWarmUp;

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    Meters meters = new Meters();
    ManagerMeters managerMeters = new ManagerMeters(meters);
    LayerServer layers = LayerServer.open(config, managerMeters);
    Optional<MetricsServer> endpoint = Optional.empty();
    FuseManagerServer server;
    try {
      managerMeters.bind(layers);
      layers.handOverMounts(config.snapshotter().fuseDevicesSocket());
      // Before answering: a manager started after one that died serves the running containers' mounts at once.
      int taken = layers.takeOverHeld();
      if (taken > 0) {
        System.err.println("flatpull fuse-manager: took over " + taken + " of the mounts the daemon held");
      }
      if (config.snapshotter().fuseManagerMetricsAddress().isPresent()) {
        endpoint = Optional.of(MetricsServer.start(config.snapshotter().fuseManagerMetricsAddress().get(), meters));
      }
      server = FuseManagerServer.serve(config, layers, FlatpullCommand.VERSION);
    } catch (IOException | RuntimeException e) {
      endpoint.ifPresent(MetricsServer::close);
      layers.close();
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
