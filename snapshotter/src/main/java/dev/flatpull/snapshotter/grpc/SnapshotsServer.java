package dev.flatpull.snapshotter.grpc;

import dev.flatpull.endpoints.grpc.UnixSockets;
import dev.flatpull.snapshotter.overlay.OverlaySnapshotter;
import io.grpc.ForwardingServerCall;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.Status;
import java.io.IOException;
import java.nio.file.Path;
import java.util.function.ObjLongConsumer;

/** containerd's Snapshots service, served on a unix socket. */
public final class SnapshotsServer implements AutoCloseable {
  private final Server server;

  private SnapshotsServer(Server server) {
    this.server = server;
  }

  public static SnapshotsServer start(Path socket, OverlaySnapshotter snapshotter) throws IOException {
    return start(socket, snapshotter, (method, nanos) -> { });
  }

  /**
   * Like {@link #start(Path, OverlaySnapshotter)}, telling {@code calls} each call's method (Prepare, Stat, ...) and
   * its time from arrival to the answer's close, in nanoseconds.
   */
  public static SnapshotsServer start(Path socket, OverlaySnapshotter snapshotter, ObjLongConsumer<String> calls)
      throws IOException {
    SnapshotsService service = new SnapshotsService(snapshotter);
    return new SnapshotsServer(UnixSockets.serve(socket,
        () -> io.grpc.ServerInterceptors.intercept(service, new Timing(calls))));
  }

  /** Times each call, from its arrival to its close. */
  private record Timing(ObjLongConsumer<String> calls) implements ServerInterceptor {
    @Override
    public <Q, A> ServerCall.Listener<Q> interceptCall(ServerCall<Q, A> call, Metadata headers,
        ServerCallHandler<Q, A> next) {
      long started = System.nanoTime();
      String method = call.getMethodDescriptor().getBareMethodName();
      return next.startCall(new ForwardingServerCall.SimpleForwardingServerCall<>(call) {
        @Override
        public void close(Status status, Metadata trailers) {
          calls.accept(method, System.nanoTime() - started);
          super.close(status, trailers);
        }
      }, headers);
    }
  }

  public void awaitTermination() throws InterruptedException {
    server.awaitTermination();
  }

  @Override
  public void close() {
    UnixSockets.stop(server);
  }
}
