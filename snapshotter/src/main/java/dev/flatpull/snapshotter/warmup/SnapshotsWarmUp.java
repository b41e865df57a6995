package dev.flatpull.snapshotter.warmup;

import dev.flatpull.endpoints.grpc.UnixSockets;
import dev.flatpull.snapshotter.grpc.SnapshotsServer;
import dev.flatpull.snapshotter.api.snapshots.v1.CleanupRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.CommitSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.ListSnapshotsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.MountsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.PrepareSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.RemoveSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.SnapshotsGrpc;
import dev.flatpull.snapshotter.api.snapshots.v1.StatSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.UsageRequest;
import dev.flatpull.snapshotter.overlay.OverlaySnapshotter;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * containerd's calls around a remote Prepare, made over gRPC on a unix socket to a throwaway snapshotter: Prepare
 * with remote labels (answered AlreadyExists), Stat, a Stat of nothing (NotFound), the container's Prepare on the
 * layer, Mounts, Usage, an ordinary unpack's Prepare and Commit, List, Remove, Cleanup. Any other answer throws.
 */
public final class SnapshotsWarmUp {
  private SnapshotsWarmUp() {}

  /**
   * @param remoteLabels the labels that make a Prepare remote (a layer the snapshotter's remote layers serve)
   */
  public static void run(Path socket, OverlaySnapshotter snapshotter, Map<String, String> remoteLabels, int rounds)
      throws IOException {
    try (SnapshotsServer server = SnapshotsServer.start(socket, snapshotter)) {
      ManagedChannel channel = UnixSockets.connect(socket);
      try {
        var stub = SnapshotsGrpc.newBlockingStub(channel);
        for (int round = 0; round < rounds; round++) {
          calls(stub.withDeadlineAfter(30, TimeUnit.SECONDS), remoteLabels, round);
        }
      } finally {
        channel.shutdownNow();
      }
    }
  }

  private static void calls(SnapshotsGrpc.SnapshotsBlockingStub stub, Map<String, String> remoteLabels, int round)
      throws IOException {
    String layer = "warm-up/layer-" + round;
    Map<String, String> labels = new HashMap<>(remoteLabels);
    labels.put(OverlaySnapshotter.TARGET_LABEL, layer);
    expect(Status.Code.ALREADY_EXISTS, () -> stub.prepare(PrepareSnapshotRequest.newBuilder()
        .setKey("warm-up/extract-" + round).putAllLabels(labels).build()));
    stub.stat(StatSnapshotRequest.newBuilder().setKey(layer).build());
    expect(Status.Code.NOT_FOUND, () -> stub.stat(StatSnapshotRequest.newBuilder().setKey("warm-up/none").build()));
    String container = "warm-up/container-" + round;
    stub.prepare(PrepareSnapshotRequest.newBuilder().setKey(container).setParent(layer).build());
    stub.mounts(MountsRequest.newBuilder().setKey(container).build());
    stub.usage(UsageRequest.newBuilder().setKey(container).build());
    String unpacked = "warm-up/unpack-" + round;
    String committed = "warm-up/committed-" + round;
    stub.prepare(PrepareSnapshotRequest.newBuilder().setKey(unpacked).setParent(layer).build());
    stub.commit(CommitSnapshotRequest.newBuilder().setName(committed).setKey(unpacked).build());
    stub.list(ListSnapshotsRequest.getDefaultInstance()).forEachRemaining(r -> r.getInfoCount());
    for (String key : List.of(container, committed, layer)) {
      stub.remove(RemoveSnapshotRequest.newBuilder().setKey(key).build());
    }
    stub.cleanup(CleanupRequest.getDefaultInstance());
  }

  private static void expect(Status.Code code, Runnable call) throws IOException {
    try {
      call.run();
    } catch (StatusRuntimeException e) {
      if (e.getStatus().getCode() == code) {
        return;
      }
      throw new IOException("warm-up call failed: " + e.getStatus(), e);
    }
    throw new IOException("warm-up call succeeded where " + code + " was expected");
  }
}
