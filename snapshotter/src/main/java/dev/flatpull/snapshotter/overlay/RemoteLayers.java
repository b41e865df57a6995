package dev.flatpull.snapshotter.overlay;

import dev.flatpull.snapshotter.store.RemoteSource;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;

/** Lazily served layers, as the snapshotter needs them; the daemon implements it with the FUSE manager. */
public interface RemoteLayers {
  /**
   * What a Prepare's labels ask for: nothing remote (an ordinary pull), a layer that can be served lazily, or a layer
   * that was asked for remotely but cannot be served lazily (then the snapshotter falls back and says why).
   */
  RemoteDecision decide(Map<String, String> labels);

  /** Mounts the layer at {@code mountPoint}; returns once it serves reads. */
  void mount(RemoteSource source, Path mountPoint) throws IOException;

  /** Detaches the mount at {@code mountPoint}, even while files in it are open. */
  void unmount(Path mountPoint) throws IOException;

  /** The mount points currently served. */
  Set<Path> served() throws IOException;

  /**
   * Whether the mount at {@code mountPoint}, which nothing serves now, can be taken over: its FUSE device is held, so
   * its containers' reads wait for a server instead of failing. Until then nothing may touch the mount point.
   */
  default boolean held(Path mountPoint) {
    return false;
  }

  /** Serves the held mount at {@code mountPoint} again, in place; returns once it serves. */
  default void takeOver(RemoteSource source, Path mountPoint) throws IOException {
    throw new IOException("remote layers cannot be taken over");
  }

  /** Lets go of the held mount's device: its waiting reads then fail, and the mount can be detached. */
  default void release(Path mountPoint) {}

  /** No remote layers at all: every Prepare is an ordinary one. */
  RemoteLayers NONE = new RemoteLayers() {
    @Override
    public RemoteDecision decide(Map<String, String> labels) {
      return RemoteDecision.notRequested();
    }

    @Override
    public void mount(RemoteSource source, Path mountPoint) throws IOException {
      throw new IOException("remote layers are not available");
    }

    @Override
    public void unmount(Path mountPoint) throws IOException {
      HostMounts.detach(mountPoint);
    }

    @Override
    public Set<Path> served() {
      return Set.of();
    }
  };
}
