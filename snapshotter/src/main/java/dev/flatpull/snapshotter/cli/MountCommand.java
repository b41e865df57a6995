package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.snapshotter.overlay.HostMounts;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
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

  private final dev.flatpull.fuse.ReadActivity activity = new dev.flatpull.fuse.ReadActivity();
  // Decompression and verification of the chunks of one request, on every core.
  private final java.util.concurrent.ExecutorService decoders = java.util.concurrent.Executors.newFixedThreadPool(
      Runtime.getRuntime().availableProcessors(), r -> {
        Thread t = new Thread(r, "flatpull-decode");
        t.setDaemon(true);
        return t;
      });
  private final List<dev.flatpull.fuse.LayerPrefetcher> prefetchers = new ArrayList<>();
  // Prefetching never blocks mounting: it runs here, one layer after another, while reads are served.
  private final java.util.concurrent.ExecutorService prefetch = java.util.concurrent.Executors.newSingleThreadExecutor(r -> {
    Thread t = new Thread(r, "flatpull-prefetch");
    t.setDaemon(true);
    return t;
  });

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    ImageReference ref = ImageReference.parse(reference);
    Path layersDir = config.root().resolve("mounts");
    clearStale(layersDir);
    LayerMount.clearStale(mountPoint);
    if (LayerMount.isMounted(mountPoint)) {
      HostMounts.run("umount", "-l", mountPoint.toString());
    }
    Files.createDirectories(mountPoint);
    PageCache cache = PageCache.open(config.cache().directoryUnder(config.root()), config.cache());
    List<LayerMount> mounts = new ArrayList<>();
    CountDownLatch stopped = new CountDownLatch(1);
    boolean[] overlay = {false};
    try (RegistryClients clients = global.clients(config, FetchListener.NONE)) {
      RegistryClient client = clients.client(ref);
      List<Descriptor> descriptors = client.resolve(ref, global.platform()).manifest().layers();
      LayerOpener opener = new LayerOpener(client, config, config.root().resolve("layers"), decoders);
      Path session = layersDir.resolve(Long.toString(ProcessHandle.current().pid()));
      Runtime.getRuntime().addShutdownHook(new Thread(() -> {
        prefetchers.forEach(dev.flatpull.fuse.LayerPrefetcher::stop);
        prefetch.shutdownNow();
        unmountAll(overlay[0], mounts);
        try {
          cache.close();
          Files.deleteIfExists(session);
        } catch (IOException ignored) {
          // Not empty or already gone: the next run's stale-mount sweep takes care of it.
        }
        stopped.countDown();
      }, "flatpull-unmount"));
      if (layer != null) {
        Descriptor d = descriptors.stream().filter(x -> x.digest().toString().startsWith(layer) || x.digest().hex().startsWith(layer))
            .findFirst().orElseThrow(() -> new java.io.FileNotFoundException("image has no layer " + layer));
        mounts.add(mountLayer(opener.open(d), cache, mountPoint));
      } else {
        for (int i = 0; i < descriptors.size(); i++) {
          mounts.add(mountLayer(opener.open(descriptors.get(i)), cache, session.resolve(Integer.toString(i))));
        }
        stack(mounts);
        overlay[0] = true;
      }
      System.err.println("mounted " + ref + " at " + mountPoint + " (" + mounts.size() + " layer"
          + (mounts.size() == 1 ? "" : "s") + "); interrupt to unmount");
      stopped.await();
    }
    return 0;
  }

  private LayerMount mountLayer(LazyLayer lazy, PageCache cache, Path at) throws IOException {
    LayerContentReader reader = new LayerContentReader(lazy, cache, LayerContentReader.DEFAULT_READAHEAD, activity);
    LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()), reader, FuseEvents.NONE), at);
    if (!noPrefetch || !noBackground) {
      dev.flatpull.fuse.LayerPrefetcher p = new dev.flatpull.fuse.LayerPrefetcher(
          lazy, cache, activity, noPrefetch ? List.of() : lazy.index().prioritized(), !noBackground);
      prefetchers.add(p);
      prefetch.execute(p);
    }
    return m;
  }

  private void stack(List<LayerMount> mounts) throws IOException {
    if (mounts.size() == 1) {
      HostMounts.run("mount", "--bind", mounts.get(0).mountPoint().toString(), mountPoint.toString());
      HostMounts.run("mount", "-o", "remount,bind,ro", mountPoint.toString());
      return;
    }
    StringBuilder lower = new StringBuilder();
    for (int i = mounts.size() - 1; i >= 0; i--) {
      lower.append(mounts.get(i).mountPoint()).append(i > 0 ? ":" : "");
    }
    HostMounts.run("mount", "-t", "overlay", "overlay", "-o", "ro,lowerdir=" + lower, mountPoint.toString());
  }

  private void unmountAll(boolean overlay, List<LayerMount> mounts) {
    try {
      if (overlay) {
        HostMounts.run("umount", mountPoint.toString());
      }
    } catch (IOException e) {
      System.err.println("flatpull: unmounting " + mountPoint + ": " + e.getMessage());
    }
    for (LayerMount m : mounts) {
      m.close();
      try {
        if (!m.mountPoint().equals(mountPoint)) {
          Files.deleteIfExists(m.mountPoint());
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
