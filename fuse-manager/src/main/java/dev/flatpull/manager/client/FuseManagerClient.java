package dev.flatpull.manager.client;

import dev.flatpull.manager.api.v1.FuseManagerGrpc;
import dev.flatpull.manager.api.v1.MountLayerRequest;
import dev.flatpull.manager.api.v1.MountLayerResponse;
import dev.flatpull.manager.api.v1.StatusRequest;
import dev.flatpull.manager.api.v1.StatusResponse;
import dev.flatpull.manager.api.v1.UnmountLayerRequest;
import dev.flatpull.endpoints.grpc.UnixSockets;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * The snapshotter daemon's side of the FUSE manager: starts it when none answers on its socket, and asks it to mount
 * and unmount layers. The manager is started in its own session, so that it survives the daemon being stopped, killed
 * or upgraded; only a deliberate {@code SIGTERM} to the manager itself unmounts the layers.
 */
public final class FuseManagerClient implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(FuseManagerClient.class.getName());
  /** The manager command's option that skips its warm-up, whatever {@code [snapshotter] warm_up} says. */
  public static final String NO_WARM_UP = "--no-warm-up";
  /** The manager command's option that takes over from the manager serving now, which then exits. */
  public static final String REPLACE = "--replace";
  private final Path socket;
  private final java.util.function.Supplier<List<String>> command;
  private final Path log;
  private ManagedChannel channel;
  // Whether a manager has answered this client: a manager started after that replaces one that exited.
  private boolean answeredBefore;

  /**
   * @param command the command that runs a manager serving {@code socket} (started under {@code setsid})
   * @param log where the manager's output goes (appended)
   */
  public FuseManagerClient(Path socket, List<String> command, Path log) {
    this(socket, fixed(List.copyOf(command)), log);
  }

  private static java.util.function.Supplier<List<String>> fixed(List<String> command) {
    return () -> command;
  }

  /** @param command the command that runs a manager, asked anew at each start (it may change: a new option) */
  public FuseManagerClient(Path socket, java.util.function.Supplier<List<String>> command, Path log) {
    this.socket = socket;
    this.command = command;
    this.log = log;
  }

  /**
   * Starts a manager unless one answers already; returns once one answers. A manager that replaces one which answered
   * this client before runs no warm-up ({@code --no-warm-up}): the layers it mounts again at once, for the containers
   * that wait on them, and every remote Prepare would only share the CPU with it (a crash matrix round once spent 8 s
   * waiting for a replacement's warm-up, when the manager warmed up before it served).
   */
  public synchronized StatusResponse ensureRunning() throws IOException {
    reconnectNow();
    try {
      StatusResponse running = statusOfTheServingOne();
      answeredBefore = true;
      return running;
    } catch (IOException notRunning) {
      LOG.info((answeredBefore ? "starting a FUSE manager in place of the one that exited, without its warm-up: "
          : "starting the FUSE manager: ") + notRunning.getMessage());
    }
    Files.createDirectories(log.toAbsolutePath().getParent());
    List<String> full = new java.util.ArrayList<>();
    full.add("setsid");
    full.addAll(command.get());
    if (answeredBefore) {
      full.add(NO_WARM_UP);
    }
    Process p = new ProcessBuilder(full).redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
        .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null"))).start();
    StatusResponse s = await(java.time.Duration.ofSeconds(60), java.util.Optional.of(p));
    answeredBefore = true;
    LOG.info("FUSE manager " + s.getPid() + " is serving " + socket);
    return s;
  }

  /** A manager replaced by one of this client's command: the two as they answered. */
  public record Replacement(StatusResponse before, StatusResponse after, java.time.Duration took) {}

  /**
   * Starts a manager from this client's command in place of the one serving now ({@link #REPLACE}): it takes every
   * mount over, then the old one exits; running containers keep their file systems. Returns once the old one has
   * exited and the new one answers.
   *
   * @throws IOException when no manager runs, or the new one fails (then the old one keeps serving)
   */
  public synchronized Replacement replace(java.time.Duration timeout) throws IOException {
    reconnectNow();
    StatusResponse before;
    try {
      before = status(5);
    } catch (IOException none) {
      throw new IOException("no FUSE manager answers on " + socket + ": nothing to replace ('flatpull serve' starts"
          + " one)", none);
    }
    long t0 = System.nanoTime();
    Files.createDirectories(log.toAbsolutePath().getParent());
    List<String> full = new java.util.ArrayList<>();
    full.add("setsid");
    full.addAll(command.get());
    full.add(REPLACE);
    Process p = new ProcessBuilder(full).redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
        .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null"))).start();
    long deadline = t0 + timeout.toNanos();
    while (running(before.getPid())) {
      if (!p.isAlive() && p.exitValue() != 0) {
        throw new IOException("the new FUSE manager exited with status " + p.exitValue() + "; FUSE manager "
            + before.getPid() + " keeps serving; see " + log);
      }
      if (System.nanoTime() > deadline) {
        throw new IOException("FUSE manager " + before.getPid() + " still serves " + timeout.toSeconds()
            + " s after its replacement started; see " + log);
      }
      pause(50, "the replacement of the FUSE manager");
    }
    StatusResponse after = await(java.time.Duration.ofNanos(Math.max(deadline - System.nanoTime(), 0)),
        java.util.Optional.of(p));
    return new Replacement(before, after, java.time.Duration.ofNanos(System.nanoTime() - t0));
  }

  /** Asks the manager {@code pid} to retire in favour of {@code successorPid}, which serves its mounts already. */
  public void retire(long pid, long successorPid) throws IOException {
    try {
      stub(10).retire(dev.flatpull.manager.api.v1.RetireRequest.newBuilder().setPid(pid)
          .setSuccessorPid(successorPid).build());
    } catch (StatusRuntimeException e) {
      throw failure("retire", e);
    }
  }

  /**
   * Waits until a manager answers, for at most {@code timeout}; starts none. For commands that need the manager the
   * daemon starts ({@code flatpull serve} starts it in the background as it begins to serve).
   */
  public StatusResponse awaitServing(java.time.Duration timeout) throws IOException {
    return await(timeout, java.util.Optional.empty());
  }

  private StatusResponse await(java.time.Duration timeout, java.util.Optional<Process> starting) throws IOException {
    long deadline = System.nanoTime() + timeout.toNanos();
    IOException last = null;
    do {
      if (starting.isPresent() && !starting.get().isAlive() && starting.get().exitValue() != 0) {
        throw new IOException("the FUSE manager exited with status " + starting.get().exitValue() + "; see " + log);
      }
      try {
        return status(2);
      } catch (IOException e) {
        last = e;
        reconnectNow();
      }
      pause(200, "the FUSE manager");
    } while (System.nanoTime() < deadline);
    throw new IOException("the FUSE manager did not answer on " + socket + " within " + timeout.toSeconds()
        + " s; see " + log, last);
  }

  /** How long a manager whose socket accepts connections but answered no status is asked again (see below). */
  private static final long HALTING_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(2);

  /**
   * The status of the manager serving now. When the call fails while something still accepts connections on the
   * socket, it is asked again on a new connection for up to 2 s: a retiring manager refuses calls, then halts under
   * them, and the socket is its successor's by then (the daemon checks the manager the moment a retiring one's
   * connection to the device holder ends, and must not start another beside its successor). The call's status cannot
   * tell the two apart: a connection that breaks under a call fails it UNAVAILABLE, as a socket nobody listens on
   * does. A socket nobody listens on (the manager died) is answered at once.
   */
  private StatusResponse statusOfTheServingOne() throws IOException {
    long deadline = System.nanoTime() + HALTING_NANOS;
    while (true) {
      try {
        return status(2);
      } catch (IOException e) {
        if (System.nanoTime() >= deadline || !listening()) {
          throw e;
        }
      }
      reconnectNow();
      pause(100, "the FUSE manager's successor");
    }
  }

  /** Whether something accepts connections on the manager's socket. */
  private boolean listening() {
    try (java.nio.channels.SocketChannel c = java.nio.channels.SocketChannel.open(
        java.net.UnixDomainSocketAddress.of(socket))) {
      return true;
    } catch (IOException nobody) {
      return false;
    }
  }

  public StatusResponse status(int timeoutSeconds) throws IOException {
    try {
      return stub(timeoutSeconds).status(StatusRequest.getDefaultInstance());
    } catch (StatusRuntimeException e) {
      throw failure("status", e);
    }
  }

  /**
   * Mounts a layer.
   *
   * @param manifest the image's manifest, when known (then the manager opens all its layers' TOCs at once and loads
   *     its runtime image)
   */
  public MountLayerResponse mount(Path mountPoint, String imageRef, String descriptorJson,
      java.util.Optional<dev.flatpull.fetcher.oci.ImageManifest> manifest) throws IOException {
    try {
      MountLayerRequest.Builder b = MountLayerRequest.newBuilder().setMountPoint(mountPoint.toString())
          .setImageRef(imageRef).setLayerDescriptorJson(descriptorJson);
      manifest.ifPresent(m -> b.setImageManifest(com.google.protobuf.ByteString.copyFrom(m.raw()))
          .setImageManifestMediaType(m.mediaType()));
      return retryingWhileHandedOver(() -> stub(600).mount(b.build()));
    } catch (StatusRuntimeException e) {
      throw failure("mount", e);
    }
  }

  /**
   * Asks the manager to start opening a layer's TOC ahead of its mount, from the layer as a Prepare's labels describe
   * it (see {@code EstargzTail}). The request is sent before this returns, so a later call of this client (the
   * layer's mount) reaches the manager after it; its answer is not waited for, and a failure (no manager, a refusal)
   * only logged: the mount opens the TOC as ever.
   */
  public void expect(String imageRef, String descriptorJson) {
    io.grpc.stub.StreamObserver<dev.flatpull.manager.api.v1.ExpectLayerResponse> answer = new io.grpc.stub.StreamObserver<>() {
      @Override
      public void onNext(dev.flatpull.manager.api.v1.ExpectLayerResponse r) {}

      @Override
      public void onError(Throwable t) {
        LOG.fine(() -> "a layer of " + imageRef + " not expected ahead of its manifest: " + t.getMessage());
      }

      @Override
      public void onCompleted() {}
    };
    FuseManagerGrpc.FuseManagerStub async;
    synchronized (this) {
      if (channel == null) {
        channel = UnixSockets.connect(socket);
      }
      async = FuseManagerGrpc.newStub(channel).withDeadlineAfter(2, TimeUnit.SECONDS);
    }
    async.expect(dev.flatpull.manager.api.v1.ExpectLayerRequest.newBuilder().setImageRef(imageRef)
        .setLayerDescriptorJson(descriptorJson).build(), answer);
  }

  /**
   * Asks the manager to serve the mount at {@code mountPoint} that an earlier manager made, through its FUSE device,
   * which the daemon holds ({@code take_over}).
   */
  public MountLayerResponse takeOver(Path mountPoint, String imageRef, String descriptorJson) throws IOException {
    try {
      MountLayerRequest request = MountLayerRequest.newBuilder().setMountPoint(mountPoint.toString())
          .setImageRef(imageRef).setLayerDescriptorJson(descriptorJson).setTakeOver(true).build();
      return retryingWhileHandedOver(() -> stub(600).mount(request));
    } catch (StatusRuntimeException e) {
      throw failure("take over", e);
    }
  }

  public void unmount(Path mountPoint) throws IOException {
    try {
      retryingWhileHandedOver(() -> stub(60).unmount(UnmountLayerRequest.newBuilder()
          .setMountPoint(mountPoint.toString()).build()));
    } catch (StatusRuntimeException e) {
      throw failure("unmount", e);
    }
  }

  /** Starts recording reads of every served layer; returns the knobs that could not be narrowed. */
  public List<String> startRecording() throws IOException {
    try {
      return stub(30).startRecording(
          dev.flatpull.manager.api.v1.StartRecordingRequest.getDefaultInstance()).getNotesList();
    } catch (StatusRuntimeException e) {
      throw failure("start recording", e);
    }
  }

  /** Stops recording and returns the pages read per layer. */
  public List<dev.flatpull.trace.LayerTrace> stopRecording() throws IOException {
    try {
      return dev.flatpull.trace.TraceFile.layersFromJson(stub(60).stopRecording(
          dev.flatpull.manager.api.v1.StopRecordingRequest.getDefaultInstance()).getLayersJson());
    } catch (StatusRuntimeException e) {
      throw failure("stop recording", e);
    }
  }

  /** Empties the manager's page cache; returns what it removed. */
  public dev.flatpull.manager.api.v1.EmptyCacheResponse emptyCache() throws IOException {
    try {
      return stub(120).emptyCache(dev.flatpull.manager.api.v1.EmptyCacheRequest.getDefaultInstance());
    } catch (StatusRuntimeException e) {
      throw failure("empty cache", e);
    }
  }

  /** How long a call refused by a retiring manager is asked again, of its successor. */
  private static final java.time.Duration HANDOVER_RETRIES = java.time.Duration.ofSeconds(40);
  private static final long RECONNECT_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(5);

  /**
   * {@code call}, asked again while a manager that hands over to its successor refuses it (ABORTED): the connection
   * is the retiring one's until it exits, then fails (UNAVAILABLE, asked again too once a refusal was seen) until it
   * is made again, to the successor.
   */
  private <T> T retryingWhileHandedOver(java.util.function.Supplier<T> call) throws IOException {
    long deadline = System.nanoTime() + HANDOVER_RETRIES.toNanos();
    boolean handingOver = false;
    // The connection is made again within a second or two; an UNAVAILABLE past that is the successor's own answer.
    long unavailableUntil = Long.MAX_VALUE;
    while (true) {
      try {
        return call.get();
      } catch (StatusRuntimeException e) {
        io.grpc.Status.Code code = e.getStatus().getCode();
        long now = System.nanoTime();
        handingOver |= code == io.grpc.Status.Code.ABORTED;
        if (handingOver && code == io.grpc.Status.Code.UNAVAILABLE && unavailableUntil == Long.MAX_VALUE) {
          unavailableUntil = now + RECONNECT_NANOS;
        }
        boolean again = handingOver && now < deadline && (code == io.grpc.Status.Code.ABORTED
            || (code == io.grpc.Status.Code.UNAVAILABLE && now < unavailableUntil));
        if (!again) {
          throw e;
        }
      }
      reconnectNow();
      pause(100, "the FUSE manager's successor");
    }
  }

  /** Whether the process {@code pid} runs: a zombie (exited, its parent yet to reap it) serves nothing. */
  public static boolean running(long pid) {
    try {
      String stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"));
      // pid (comm) state ...: comm may hold anything, the state follows its last parenthesis.
      int at = stat.lastIndexOf(')');
      return at > 0 && at + 2 < stat.length() && stat.charAt(at + 2) != 'Z';
    } catch (IOException gone) {
      return false;
    }
  }

  private static void pause(long millis, String waitingFor) throws InterruptedIOException {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted waiting for " + waitingFor);
    }
  }

  /**
   * After a failed connection gRPC waits before it tries again (1 s, then 1.6 s, 2.6 s, ...), failing calls at once
   * meanwhile: a manager that came up in that time was answered only seconds later (the first Prepare after a node's
   * start waited 1.5-4 s for it), and a status check in that time took a running manager for a dead one.
   */
  private synchronized void reconnectNow() {
    if (channel != null) {
      channel.resetConnectBackoff();
    }
  }

  private synchronized FuseManagerGrpc.FuseManagerBlockingStub stub(int timeoutSeconds) {
    if (channel == null) {
      channel = UnixSockets.connect(socket);
    }
    return FuseManagerGrpc.newBlockingStub(channel).withDeadlineAfter(timeoutSeconds, TimeUnit.SECONDS);
  }

  private IOException failure(String what, StatusRuntimeException e) {
    return new IOException("FUSE manager " + what + ": " + e.getStatus().getCode() + ": "
        + e.getStatus().getDescription(), e);
  }

  @Override
  public synchronized void close() {
    if (channel != null) {
      channel.shutdownNow();
      channel = null;
    }
  }
}
