package dev.flatpull.manager.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.endpoints.grpc.UnixSockets;
import dev.flatpull.manager.api.v1.FuseManagerGrpc;
import dev.flatpull.manager.api.v1.MountLayerRequest;
import dev.flatpull.manager.api.v1.MountLayerResponse;
import dev.flatpull.manager.api.v1.StatusRequest;
import dev.flatpull.manager.api.v1.StatusResponse;
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

  /** Answers each mount, and each status, with the next of its answers, then succeeds; counts the calls. */
  private static final class Manager extends FuseManagerGrpc.FuseManagerImplBase {
    final AtomicInteger calls = new AtomicInteger();
    final AtomicInteger statusCalls = new AtomicInteger();
    final List<Status> answers;
    final List<Status> statusAnswers;

    Manager(List<Status> answers) {
      this(answers, List.of());
    }

    Manager(List<Status> answers, List<Status> statusAnswers) {
      this.answers = answers;
      this.statusAnswers = statusAnswers;
    }

    @Override
    public void status(StatusRequest r, StreamObserver<StatusResponse> out) {
      answer(statusCalls, statusAnswers, StatusResponse.newBuilder().setPid(42).build(), out);
    }

    @Override
    public void mount(MountLayerRequest r, StreamObserver<MountLayerResponse> out) {
      answer(calls, answers, MountLayerResponse.newBuilder().setEntries(7).build(), out);
    }

    private static <T> void answer(AtomicInteger calls, List<Status> answers, T success, StreamObserver<T> out) {
      int n = calls.getAndIncrement();
      if (n < answers.size()) {
        out.onError(answers.get(n).asRuntimeException());
      } else {
        out.onNext(success);
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
  void aManagerThatHaltsUnderTheStatusCall_isAskedAgain_andNoOtherIsStartedBesideItsSuccessor() throws Exception {
    // A retiring manager refuses, then halts under the call (as gRPC reports a connection that broke: UNKNOWN, or
    // UNAVAILABLE as for a socket nobody listens on); the new connection reaches its successor.
    Manager m = new Manager(List.of(), List.of(Status.ABORTED, Status.UNKNOWN.withDescription("channel closed"),
        Status.UNAVAILABLE.withDescription("io exception")));
    Path socket = dir.resolve("m.sock");
    Server server = UnixSockets.serve(socket, m);
    // No command: starting a manager would fail.
    try (FuseManagerClient c = new FuseManagerClient(socket, List.of(), dir.resolve("log"))) {
      assertEquals(42, c.ensureRunning().getPid());
      assertEquals(4, m.statusCalls.get());
    } finally {
      server.shutdownNow();
    }
  }

  @Test
  void noManagerListening_startsOneAtOnce() throws Exception {
    try (FuseManagerClient c = new FuseManagerClient(dir.resolve("none.sock"), List.of("false"), dir.resolve("log"))) {
      IOException e = assertThrows(IOException.class, c::ensureRunning);
      assertTrue(e.getMessage().contains("exited with status 1"), e.getMessage());
    }
  }

  @Test
  void aMountThatFails_otherwise_isAskedOnce() throws Exception {
    Manager m = new Manager(List.of(Status.UNAVAILABLE.withDescription("the layer's TOC is malformed")));
    IOException e = assertThrows(IOException.class, () -> mount(m));
    assertEquals(1, m.calls.get(), e.getMessage());
  }
}
