package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.snapshotter.overlay.OverlayStack;
import dev.flatpull.manager.LayerServer;
import dev.flatpull.manager.RemoteLayerMetrics;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code flatpull mount REF MOUNTPOINT}: a foreground, read-only, lazily served view of an image, for debugging. */
@Command(name = "mount", mixinStandardHelpOptions = true,
    description = {"Mount an image read-only at MOUNTPOINT until interrupted: each layer is a FUSE file system served",
        "lazily through the page cache, and the layers are stacked with overlayfs (or one layer alone, with --layer).",
        "SIGINT or SIGTERM unmounts. Stale mounts left by a killed run are cleared first. Needs root and /dev/fuse."})
final class MountCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Parameters(index = "0", paramLabel = "REF", description = "Image reference.")
  String reference;

  @Parameters(index = "1", paramLabel = "MOUNTPOINT", description = "Directory to mount at (created if missing).")
  Path mountPoint;

  @Option(names = "--layer", paramLabel = "DIGEST", description = "Mount only this layer (a digest or its prefix).")
  String layer;

  @Option(names = "--no-prefetch", description = "Do not fetch the layers' prioritized (landmark) files after mounting.")
  boolean noPrefetch;

  @Option(names = "--no-background-fetch",
      description = "After the prioritized files, do not fetch the rest of each layer in the background.")
  boolean noBackground;

  @Option(names = "--no-runtime-image", description = "Do not look for the image's runtime image; lazy loading only.")
  boolean noRuntimeImage;

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    config = config.withSnapshotter(config.snapshotter().withFetching(!noPrefetch, !noBackground));
    if (noRuntimeImage) {
      config = config.withRuntimeImage(config.runtimeImage().withLoad(false));
    }
    ImageReference ref = ImageReference.parse(reference);
    Path layersDir = config.root().resolve("mounts");
    clearStale(layersDir);
    LayerMount.clearStale(mountPoint);
    if (LayerMount.isMounted(mountPoint)) {
      dev.flatpull.core.HostCommand.run("umount", "-l", mountPoint.toString());
    }
    Files.createDirectories(mountPoint);
    List<Path> mounts = new ArrayList<>();
    CountDownLatch stopped = new CountDownLatch(1);
    boolean[] overlay = {false};
    // The FUSE manager's read path, in this process: page cache, runtime image, prefetching, all the same.
    LayerServer server = LayerServer.open(config, RemoteLayerMetrics.NONE);
    Path session = layersDir.resolve(Long.toString(ProcessHandle.current().pid()));
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      unmountAll(overlay[0], server, mounts);
      try {
        server.close();
        Files.deleteIfExists(session);
      } catch (IOException ignored) {
        // Not empty or already gone: the next run's stale-mount sweep takes care of it.
      }
      stopped.countDown();
    }, "flatpull-unmount"));
    ImageManifest manifest;
    try (RegistryClients clients = global.clients(config, FetchListener.NONE)) {
      manifest = clients.client(ref).resolve(ref, global.platform()).manifest();
    }
    String pinned = ref.withDigest(manifest.digest()).toString();
    List<Descriptor> descriptors = manifest.layers();
    if (layer != null) {
      Descriptor d = descriptors.stream().filter(x -> x.digest().toString().startsWith(layer) || x.digest().hex().startsWith(layer))
          .findFirst().orElseThrow(() -> new java.io.FileNotFoundException("image has no layer " + layer));
      server.mount(mountPoint, pinned, OciDocuments.writeDescriptor(d), Optional.of(manifest));
      mounts.add(mountPoint);
    } else {
      for (int i = 0; i < descriptors.size(); i++) {
        Path at = session.resolve(Integer.toString(i));
        Files.createDirectories(at);
        server.mount(at, pinned, OciDocuments.writeDescriptor(descriptors.get(i)), Optional.of(manifest));
        mounts.add(at);
      }
      stack(mounts);
      overlay[0] = true;
    }
    System.err.println("mounted " + ref + " at " + mountPoint + " (" + mounts.size() + " layer"
        + (mounts.size() == 1 ? "" : "s") + "); interrupt to unmount");
    stopped.await();
    return 0;
  }

  private void stack(List<Path> mounts) throws IOException {
    if (mounts.size() == 1) {
      dev.flatpull.core.HostCommand.run("mount", "--bind", mounts.get(0).toString(), mountPoint.toString());
      dev.flatpull.core.HostCommand.run("mount", "-o", "remount,bind,ro", mountPoint.toString());
      return;
    }
    List<String> lower = new ArrayList<>();
    for (int i = mounts.size() - 1; i >= 0; i--) {
      lower.add(mounts.get(i).toString());
    }
    dev.flatpull.core.HostCommand.run("mount", "-t", "overlay", "overlay", "-o",
        "ro," + String.join(",", OverlayStack.lowerOptions(lower)), mountPoint.toString());
  }

  private void unmountAll(boolean overlay, LayerServer server, List<Path> mounts) {
    try {
      if (overlay) {
        dev.flatpull.core.HostCommand.run("umount", mountPoint.toString());
      }
    } catch (IOException e) {
      System.err.println("flatpull: unmounting " + mountPoint + ": " + e.getMessage());
    }
    for (Path m : mounts) {
      try {
        // The layers stay on the node's record: a later mount of them opens their kept index files.
        server.unmount(m, false);
        if (!m.equals(mountPoint)) {
          Files.deleteIfExists(m);
        }
      } catch (IOException ignored) {
        // An empty directory left behind is harmless.
      }
    }
  }

  /** Clears mounts of earlier runs that were killed (their FUSE servers are gone). */
  private static void clearStale(Path layersDir) throws IOException {
    if (!Files.isDirectory(layersDir)) {
      return;
    }
    try (var sessions = Files.list(layersDir)) {
      for (Path session : sessions.toList()) {
        if (ProcessHandle.of(Long.parseLong(session.getFileName().toString())).isPresent()) {
          continue;
        }
        // Its owner is gone, so whatever is still mounted there is stale.
        try (var layers = Files.list(session)) {
          for (Path l : layers.toList()) {
            if (LayerMount.isMounted(l)) {
              LayerMount.unmountLazily(l);
            }
            Files.deleteIfExists(l);
          }
        }
        Files.deleteIfExists(session);
      }
    } catch (NumberFormatException notOurs) {
      // Leave foreign directories alone.
    }
  }
}
