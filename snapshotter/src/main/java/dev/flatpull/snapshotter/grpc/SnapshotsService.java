package dev.flatpull.snapshotter.grpc;

import com.google.protobuf.Empty;
import com.google.protobuf.Timestamp;
import dev.flatpull.snapshotter.api.snapshots.v1.CleanupRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.CommitSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.Info;
import dev.flatpull.snapshotter.api.snapshots.v1.ListSnapshotsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.ListSnapshotsResponse;
import dev.flatpull.snapshotter.api.snapshots.v1.MountsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.MountsResponse;
import dev.flatpull.snapshotter.api.snapshots.v1.PrepareSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.PrepareSnapshotResponse;
import dev.flatpull.snapshotter.api.snapshots.v1.RemoveSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.SnapshotsGrpc;
import dev.flatpull.snapshotter.api.snapshots.v1.StatSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.StatSnapshotResponse;
import dev.flatpull.snapshotter.api.snapshots.v1.UpdateSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.UpdateSnapshotResponse;
import dev.flatpull.snapshotter.api.snapshots.v1.UsageRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.UsageResponse;
import dev.flatpull.snapshotter.api.snapshots.v1.ViewSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.ViewSnapshotResponse;
import dev.flatpull.snapshotter.api.types.Mount;
import dev.flatpull.snapshotter.overlay.ListFilter;
import dev.flatpull.snapshotter.overlay.OverlaySnapshotter;
import dev.flatpull.snapshotter.overlay.SnapshotMount;
import dev.flatpull.snapshotter.store.Snapshot;
import dev.flatpull.snapshotter.store.SnapshotException;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.time.Instant;
import java.util.List;
import java.util.logging.Level;
import java.util.logging.Logger;

/** containerd's Snapshots service over an {@link OverlaySnapshotter}; errors become gRPC codes here and only here. */
final class SnapshotsService extends SnapshotsGrpc.SnapshotsImplBase {
  private static final Logger LOG = Logger.getLogger(SnapshotsService.class.getName());
  // containerd sends at most this many infos per List message; larger batches stay under gRPC's 4 MiB default.
  private static final int LIST_BATCH = 100;

  private final OverlaySnapshotter snapshotter;

  SnapshotsService(OverlaySnapshotter snapshotter) {
    this.snapshotter = snapshotter;
  }

  @Override
  public void prepare(PrepareSnapshotRequest r, StreamObserver<PrepareSnapshotResponse> out) {
    answer("prepare " + r.getKey(), out, () -> PrepareSnapshotResponse.newBuilder()
        .addAllMounts(toProto(snapshotter.prepare(r.getKey(), r.getParent(), r.getLabelsMap()))).build());
  }

  @Override
  public void view(ViewSnapshotRequest r, StreamObserver<ViewSnapshotResponse> out) {
    answer("view " + r.getKey(), out, () -> ViewSnapshotResponse.newBuilder()
        .addAllMounts(toProto(snapshotter.view(r.getKey(), r.getParent(), r.getLabelsMap()))).build());
  }

  @Override
  public void mounts(MountsRequest r, StreamObserver<MountsResponse> out) {
    answer("mounts " + r.getKey(), out,
        () -> MountsResponse.newBuilder().addAllMounts(toProto(snapshotter.mounts(r.getKey()))).build());
  }

  @Override
  public void commit(CommitSnapshotRequest r, StreamObserver<Empty> out) {
    answer("commit " + r.getKey(), out, () -> {
      snapshotter.commit(r.getName(), r.getKey(), r.getLabelsMap());
      return Empty.getDefaultInstance();
    });
  }

  @Override
  public void remove(RemoveSnapshotRequest r, StreamObserver<Empty> out) {
    answer("remove " + r.getKey(), out, () -> {
      snapshotter.remove(r.getKey());
      return Empty.getDefaultInstance();
    });
  }

  @Override
  public void stat(StatSnapshotRequest r, StreamObserver<StatSnapshotResponse> out) {
    answer("stat " + r.getKey(), out,
        () -> StatSnapshotResponse.newBuilder().setInfo(toProto(snapshotter.stat(r.getKey()))).build());
  }

  @Override
  public void update(UpdateSnapshotRequest r, StreamObserver<UpdateSnapshotResponse> out) {
    answer("update " + r.getInfo().getName(), out, () -> UpdateSnapshotResponse.newBuilder()
        .setInfo(toProto(snapshotter.update(r.getInfo().getName(), r.getInfo().getLabelsMap(),
            r.getUpdateMask().getPathsList()))).build());
  }

  @Override
  public void list(ListSnapshotsRequest r, StreamObserver<ListSnapshotsResponse> out) {
    LOG.fine(() -> "list " + r.getFiltersList());
    List<Snapshot> all;
    try {
      all = snapshotter.list(ListFilter.parse(r.getFiltersList()));
    } catch (SnapshotException | IOException | RuntimeException e) {
      out.onError(status("list", e));
      return;
    }
    ListSnapshotsResponse.Builder batch = ListSnapshotsResponse.newBuilder();
    for (Snapshot s : all) {
      batch.addInfo(toProto(s));
      if (batch.getInfoCount() == LIST_BATCH) {
        out.onNext(batch.build());
        batch = ListSnapshotsResponse.newBuilder();
      }
    }
    if (batch.getInfoCount() > 0) {
      out.onNext(batch.build());
    }
    out.onCompleted();
  }

  @Override
  public void usage(UsageRequest r, StreamObserver<UsageResponse> out) {
    answer("usage " + r.getKey(), out, () -> {
      long[] u = snapshotter.usage(r.getKey());
      return UsageResponse.newBuilder().setSize(u[0]).setInodes(u[1]).build();
    });
  }

  @Override
  public void cleanup(CleanupRequest r, StreamObserver<Empty> out) {
    answer("cleanup", out, () -> {
      snapshotter.cleanup();
      return Empty.getDefaultInstance();
    });
  }

  @FunctionalInterface
  private interface Call<T> {
    T run() throws SnapshotException, IOException;
  }

  private static <T> void answer(String what, StreamObserver<T> out, Call<T> call) {
    LOG.fine(what);
    T result;
    try {
      result = call.run();
    } catch (SnapshotException | IOException | RuntimeException e) {
      out.onError(status(what, e));
      return;
    }
    out.onNext(result);
    out.onCompleted();
  }

  static io.grpc.StatusRuntimeException status(String what, Exception e) {
    if (e instanceof SnapshotException se) {
      LOG.fine(() -> what + ": " + se.code() + ": " + se.getMessage());
      Status s = switch (se.code()) {
        case NOT_FOUND -> Status.NOT_FOUND;
        case ALREADY_EXISTS -> Status.ALREADY_EXISTS;
        case FAILED_PRECONDITION -> Status.FAILED_PRECONDITION;
        case INVALID_ARGUMENT -> Status.INVALID_ARGUMENT;
        case UNAVAILABLE -> Status.UNAVAILABLE;
      };
      return s.withDescription(se.getMessage()).asRuntimeException();
    }
    LOG.log(Level.WARNING, what + " failed", e);
    return Status.INTERNAL.withDescription(what + ": " + e.getMessage()).withCause(e).asRuntimeException();
  }

  private static List<Mount> toProto(List<SnapshotMount> mounts) {
    return mounts.stream().map(m -> Mount.newBuilder().setType(m.type()).setSource(m.source())
        .addAllOptions(m.options()).build()).toList();
  }

  private static Info toProto(Snapshot s) {
    return Info.newBuilder()
        .setName(s.name())
        .setParent(s.parent().orElse(""))
        .setKind(switch (s.kind()) {
          case VIEW -> dev.flatpull.snapshotter.api.snapshots.v1.Kind.VIEW;
          case ACTIVE -> dev.flatpull.snapshotter.api.snapshots.v1.Kind.ACTIVE;
          case COMMITTED -> dev.flatpull.snapshotter.api.snapshots.v1.Kind.COMMITTED;
        })
        .setCreatedAt(timestamp(s.created()))
        .setUpdatedAt(timestamp(s.updated()))
        .putAllLabels(s.labels())
        .build();
  }

  private static Timestamp timestamp(Instant t) {
    return Timestamp.newBuilder().setSeconds(t.getEpochSecond()).setNanos(t.getNano()).build();
  }

}
