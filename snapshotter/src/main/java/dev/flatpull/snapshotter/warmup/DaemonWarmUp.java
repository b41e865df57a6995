package dev.flatpull.snapshotter.warmup;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.snapshotter.overlay.DirectoryTrees;
import dev.flatpull.snapshotter.overlay.OverlaySnapshotter;
import dev.flatpull.snapshotter.overlay.RemoteDecision;
import dev.flatpull.snapshotter.overlay.RemoteLayers;
import dev.flatpull.snapshotter.overlay.SnapshotterMetrics;
import dev.flatpull.manager.client.FuseManagerClient;
import dev.flatpull.snapshotter.remote.RegistryRemoteLayers;
import dev.flatpull.snapshotter.remote.RemoteLabels;
import dev.flatpull.snapshotter.warmup.WarmUp;
import dev.flatpull.snapshotter.store.RemoteSource;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Runs the daemon's part of a cold pull before it serves: containerd's calls around a remote Prepare
 * ({@link SnapshotsWarmUp}), over gRPC on a unix socket of its own, against a throwaway snapshotter whose remote layer
 * is decided through the real registry client and manifest lookup (of a {@link WarmUp.TinyImage}) but not mounted.
 * On a fresh JVM these cost the first remote Prepare of a node about 150 ms that later ones do not pay: about 80 ms
 * before the Prepare reached the service (the gRPC server's first call), 45 ms for the first metadata write, 25 ms on
 * the way back (measured in the cold-start benchmark, 2 ms link).
 */
public final class DaemonWarmUp {
  // Enough for every class on the path to be loaded and linked and the interpreter's call sites resolved; not for the
  // JIT compiler, which this short path does not need as the TOC parser does.
  private static final int ROUNDS = 4;

  private DaemonWarmUp() {}

  /**
   * Runs the warm-up under {@code ROOT/warm-up-daemon} before {@code flatpull serve} serves, when
   * {@code [snapshotter] warm_up} asks for it; a failure is logged, never fatal (the first remote Prepare is then
   * slower).
   */
  public static void beforeServing(FlatpullConfig config, Platform platform) {
    WarmUp.ifAskedFor(config, "the Snapshots API and the registry client", () -> run(
        config.root().resolve("warm-up-daemon"), platform, OverlaySnapshotter.Environment.system()));
  }

  /** @param env the clocks of the throwaway snapshotter, and its deletion thread (shut down when it closes) */
  static void run(Path dir, Platform platform, OverlaySnapshotter.Environment env) throws IOException {
    try {
      WarmUp.withTinyImage(dir.resolve("image"), image -> snapshots(dir, platform, image, env));
    } finally {
      DirectoryTrees.delete(dir);
    }
  }

  private static void snapshots(Path dir, Platform platform, WarmUp.TinyImage image, OverlaySnapshotter.Environment env)
      throws IOException {
    for (int round = 0; round < 3; round++) {
      image.clients().client(image.ref()).resolve(image.ref(), platform);
    }
    try (FuseManagerClient noManager = new FuseManagerClient(dir.resolve("no-manager.sock"), List.of(),
            dir.resolve("no-manager.log"));
        OverlaySnapshotter snapshotter = OverlaySnapshotter.openThrowaway(dir.resolve("root"), new DecidedNotMounted(
            new RegistryRemoteLayers(image.clients(), platform, noManager, env.nanoTime())), new SnapshotterMetrics() {},
            env)) {
      // With the layer's inherited labels, as containerd's unpacker sends them: the first Prepare also asks for the
      // TOC ahead of the manifest (of no manager here; the request is made and refused all the same).
      Map<String, String> labels = new java.util.HashMap<>(image.inheritedLabels());
      labels.put(RemoteLabels.STARGZ_REFERENCE, image.ref().toString());
      labels.put(RemoteLabels.STARGZ_DIGEST, image.layer().toString());
      SnapshotsWarmUp.run(dir.resolve("snapshots.sock"), snapshotter, labels, ROUNDS);
      snapshotter.awaitDeletions();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("interrupted warming up");
    }
  }

  /** The daemon's remote layers up to the mount: decided (labels, manifest, format) for real, never mounted. */
  private record DecidedNotMounted(RemoteLayers decider) implements RemoteLayers {
    @Override
    public RemoteDecision decide(Map<String, String> labels) {
      return decider.decide(labels);
    }

    @Override
    public void mount(RemoteSource source, Path mountPoint) {}

    @Override
    public void unmount(Path mountPoint) {}

    @Override
    public Set<Path> served() {
      return Set.of();
    }
  }
}
