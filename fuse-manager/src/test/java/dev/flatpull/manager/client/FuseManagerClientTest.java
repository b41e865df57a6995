package dev.flatpull.manager.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.flatpull.endpoints.grpc.UnixSockets;
import dev.flatpull.manager.api.v1.FuseManagerGrpc;
import dev.flatpull.manager.api.v1.MountLayerRequest;
import dev.flatpull.manager.api.v1.MountLayerResponse;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The daemon's client against a real gRPC server on a unix socket, answering as a retiring manager does. */
class FuseManagerClientTest {
  @TempDir Path dir;

  /** Answers each mount with the next of {@code answers}, then succeeds; counts the calls. */
  private static final class Manager extends FuseManagerGrpc.FuseManagerImplBase {
    final AtomicInteger calls = new AtomicInteger();
    final List<Status> answers;

    Manager(List<Status> answers) {
      this.answers = answers;
    }

    @Override
    public void mount(MountLayerRequest r, StreamObserver<MountLayerResponse> out) {
      int n = calls.getAndIncrement();
      if (n < answers.size()) {
        out.onError(answers.get(n).asRuntimeException());
      } else {
        out.onNext(MountLayerResponse.newBuilder().setEntries(7).build());
        out.onCompleted();
      }
    }
  }

  private MountLayerResponse mount(Manager m) throws IOException {
    Path socket = dir.resolve("m.sock");
    Server server = UnixSockets.serve(socket, m);
    try (FuseManagerClient c = new FuseManagerClient(socket, List.of(), dir.resolve("log"))) {
      return c.mount(dir.resolve("mnt"), "r/i:t", "{}", Optional.empty());
    } finally {
      server.shutdownNow();
    }
  }

  @Test
  void aMountRefusedByARetiringManager_isAskedAgain() throws Exception {
    Manager m = new Manager(List.of(Status.ABORTED, Status.ABORTED,
        Status.UNAVAILABLE.withDescription("io exception")));
    assertEquals(7, mount(m).getEntries());
    assertEquals(4, m.calls.get());
  }

  @Test
  void aMountThatFails_otherwise_isAskedOnce() throws Exception {
    Manager m = new Manager(List.of(Status.UNAVAILABLE.withDescription("the layer's TOC is malformed")));
    IOException e = assertThrows(IOException.class, () -> mount(m));
    assertEquals(1, m.calls.get(), e.getMessage());
  }
}
