package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.snapshotter.remote.FuseManagerServer;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

/** {@code flatpull fuse-manager}: the process that serves remote layers; started by {@code flatpull serve}. */
@Command(name = "fuse-manager", hidden = true, mixinStandardHelpOptions = true,
    description = {"Serve lazily pulled layers over FUSE for the snapshotter daemon, on [snapshotter]",
        "fuse_manager_socket. Started by 'flatpull serve' when none runs. SIGTERM unmounts every layer it serves,",
        "which breaks running containers: stop it only when no container uses flatpull's snapshots."})
final class FuseManagerCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    FuseManagerServer server = FuseManagerServer.start(config, FlatpullCommand.VERSION);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        server.close();
      } catch (Exception e) {
        System.err.println("flatpull fuse-manager: stopping: " + e.getMessage());
      }
    }, "flatpull-fuse-manager-stop"));
    System.err.println("flatpull fuse-manager " + ProcessHandle.current().pid() + ": serving "
        + config.snapshotter().fuseManagerSocket());
    server.awaitTermination();
    return 0;
  }
}
