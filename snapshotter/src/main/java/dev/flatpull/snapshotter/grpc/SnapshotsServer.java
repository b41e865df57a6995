package dev.flatpull.snapshotter.grpc;

import dev.flatpull.endpoints.grpc.UnixSockets;
import dev.flatpull.snapshotter.overlay.OverlaySnapshotter;
import io.grpc.Server;
import java.io.IOException;
import java.nio.file.Path;

/** containerd's Snapshots service, served on a unix socket. */
public final class SnapshotsServer implements AutoCloseable {
  private final Server server;

  private SnapshotsServer(Server server) {
    this.server = server;
  }

  public static SnapshotsServer start(Path socket, OverlaySnapshotter snapshotter) throws IOException {
    return new SnapshotsServer(UnixSockets.serve(socket, new SnapshotsService(snapshotter)));
  }

  public void awaitTermination() throws InterruptedException {
    server.awaitTermination();
  }

  @Override
  public void close() {
    UnixSockets.stop(server);
  }
}
