package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.manager.client.FuseManagerClient;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * {@code flatpull replace-manager}: a FUSE manager from this build in place of the running one, without unmounting
 * (docs/reliability.md, "Upgrading").
 */
@Command(name = "replace-manager", mixinStandardHelpOptions = true,
    description = {"Start a FUSE manager from this build in place of the one that runs: it serves every layer mount "
        + "beside the old one, which then exits without unmounting. Running containers keep their root file systems.",
        "To upgrade flatpull on a node: install the new build, restart 'flatpull serve', then run this.",
        "Refused, the old manager serving on, when the daemon does not hold the FUSE device of one of its mounts (the "
        + "libfuse engine, or no daemon running)."})
final class ReplaceManagerCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Option(names = "--timeout", defaultValue = "2m", paramLabel = "DURATION",
      description = "How long the replacement may take, such as 90s or 5m (default: ${DEFAULT-VALUE}).")
  String timeout;

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    try (FuseManagerClient manager = new FuseManagerClient(config.snapshotter().fuseManagerSocket(),
        ManagerCommandLine.of(config, global), config.root().resolve("fuse-manager.log"))) {
      FuseManagerClient.Replacement r = manager.replace(Durations.parse("--timeout", timeout));
      System.out.printf("FUSE manager %d (version %s) replaced by %d (version %s) in %d ms; %d layer mounts served%n",
          r.before().getPid(), r.before().getVersion(), r.after().getPid(), r.after().getVersion(),
          r.took().toMillis(), r.after().getLayersCount());
      if (r.after().getLayersCount() < r.before().getLayersCount()) {
        System.err.println("flatpull: " + (r.before().getLayersCount() - r.after().getLayersCount()) + " of the old"
            + " manager's mounts are not served yet; the daemon takes them over within 10 s");
      }
      return 0;
    }
  }
}
