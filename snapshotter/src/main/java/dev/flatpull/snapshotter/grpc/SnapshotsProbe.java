package dev.flatpull.snapshotter.grpc;

import dev.flatpull.endpoints.grpc.UnixSockets;
import dev.flatpull.snapshotter.api.snapshots.v1.ListSnapshotsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.SnapshotsGrpc;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/** Asks a snapshotter socket whether it answers containerd's Snapshots API. */
public final class SnapshotsProbe {
  private SnapshotsProbe() {}

  /** Lists the snapshots on {@code socket} and returns how many there are. */
  public static long count(Path socket) throws IOException {
    ManagedChannel ch = UnixSockets.connect(socket);
    try {
      long n = 0;
      var it = SnapshotsGrpc.newBlockingStub(ch).withDeadlineAfter(5, TimeUnit.SECONDS)
          .list(ListSnapshotsRequest.getDefaultInstance());
      while (it.hasNext()) {
        n += it.next().getInfoCount();
      }
      return n;
    } catch (StatusRuntimeException e) {
      throw new IOException(socket + ": " + e.getStatus(), e);
    } finally {
      ch.shutdownNow();
    }
  }
}
