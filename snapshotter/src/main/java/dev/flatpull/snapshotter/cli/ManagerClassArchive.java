package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.endpoints.metrics.Meters;
import dev.flatpull.manager.FuseManagerServer;
import dev.flatpull.manager.LayerServer;
import dev.flatpull.manager.metrics.ManagerMeters;
import dev.flatpull.snapshotter.warmup.WarmUp;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * The FUSE manager's class-data archive (AppCDS, {@link ManagerCommandLine#archive}): trained once per jar copy and
 * JVM, in a process of its own at the lowest CPU priority, some minutes after the daemon starts, by a daemon whose
 * configuration asks for warm-ups; every manager started after that maps it. Its main gain is the pause of a takeover, most of which is a new manager's
 * start (docs/reliability.md).
 */
final class ManagerClassArchive {
  private static final Logger LOG = Logger.getLogger(ManagerClassArchive.class.getName());

  private ManagerClassArchive() {}

  /**
   * Trains the archive in the background, {@code [snapshotter] class_archive_after} from now, unless it exists, the
   * manager runs from no jar, or warm-ups are off.
   */
  static void trainInBackground(FlatpullConfig config, ManagerCommandLine manager) {
    if (!config.snapshotter().warmUp() || manager.archive().isEmpty() || Files.exists(manager.archive().get())) {
      return;
    }
    Thread t = new Thread(() -> {
      try {
        Thread.sleep(config.snapshotter().classArchiveAfter().toMillis());
        if (Files.exists(manager.archive().get())) {
          return; // another daemon's, meanwhile
        }
        train(manager, manager.archive().get());
      } catch (IOException e) {
        LOG.warning("training the FUSE manager's class-data archive failed (managers start without it): " + e);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }, "flatpull-class-archive");
    t.setDaemon(true);
    t.start();
  }

  private static void train(ManagerCommandLine manager, Path archive) throws IOException, InterruptedException {
    long t0 = System.nanoTime();
    Path temp = archive.resolveSibling(archive.getFileName() + ".training");
    Files.deleteIfExists(temp);
    Path log = archive.resolveSibling("class-archive-training.log");
    List<String> cmd = new ArrayList<>(List.of("nice", "-n", "19"));
    cmd.addAll(manager.training(temp));
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile())
        .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null"))).start();
    if (!p.waitFor(10, TimeUnit.MINUTES)) {
      p.destroyForcibly();
      throw new IOException("still training after 10 minutes; see " + log);
    }
    if (p.exitValue() != 0 || !Files.isRegularFile(temp)) {
      Files.deleteIfExists(temp);
      throw new IOException("the training exited with status " + p.exitValue() + "; see " + log);
    }
    Files.move(temp, archive, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    LOG.info(String.format("trained the FUSE manager's class-data archive in %.1f s (%d MiB): managers started from"
        + " now on map it", (System.nanoTime() - t0) / 1e9, Files.size(archive) >> 20));
  }

  /**
   * The training itself, in the process whose classes the JVM archives at its exit: what a manager's start loads
   * (its layer server, the hand-over of mounts, the gRPC service), then its warm-up (the service as the daemon calls
   * it; TOCs, tree, mount and reads of a synthetic layer). All of it under a directory of its own, removed after:
   * nothing of the node's manager, page cache or sockets is touched.
   */
  static void train(FlatpullConfig config, String version) throws Exception {
    Path parent = Files.createDirectories(config.root().resolve("fuse-manager"));
    Path dir = Files.createTempDirectory(parent, "training");
    try {
      FlatpullConfig c = FlatpullConfig.parse("class-archive training", "root = \"" + dir.resolve("root") + "\"\n"
          + "[registry]\nplain_http = true\nconfig_path = \"\"\nmax_attempts = 1\n"
          + "[snapshotter]\nsocket = \"" + dir.resolve("flatpull.sock") + "\"\nfuse_manager_socket = \""
          + dir.resolve("fuse-manager.sock") + "\"\nbackground_fetch = false\n");
      ManagerMeters meters = new ManagerMeters(new Meters());
      LayerServer layers = LayerServer.open(c, meters);
      meters.bind(layers);
      // No daemon listens there: what a manager does before its daemon does.
      layers.handOverMounts(c.snapshotter().fuseDevicesSocket());
      layers.takeOverHeld();
      FuseManagerServer server = FuseManagerServer.serve(c, layers, version, false);
      try {
        WarmUp.service(dir.resolve("service"), version, System::nanoTime, InstantSource.system());
        WarmUp.run(dir.resolve("run"), InstantSource.system());
      } finally {
        server.close();
      }
    } finally {
      dev.flatpull.snapshotter.overlay.DirectoryTrees.delete(dir);
    }
  }
}
