package dev.flatpull.manager;

import dev.flatpull.manager.api.v1.FuseManagerGrpc;
import dev.flatpull.manager.api.v1.MountLayerRequest;
import dev.flatpull.manager.api.v1.MountLayerResponse;
import dev.flatpull.manager.api.v1.MountedLayer;
import dev.flatpull.manager.api.v1.RetireRequest;
import dev.flatpull.manager.api.v1.RetireResponse;
import dev.flatpull.manager.api.v1.StartRecordingRequest;
import dev.flatpull.manager.api.v1.StartRecordingResponse;
import dev.flatpull.manager.api.v1.StatusRequest;
import dev.flatpull.manager.api.v1.StopRecordingRequest;
import dev.flatpull.manager.api.v1.StopRecordingResponse;
import dev.flatpull.trace.TraceFile;
import dev.flatpull.manager.api.v1.StatusResponse;
import dev.flatpull.manager.api.v1.UnmountLayerRequest;
import dev.flatpull.manager.api.v1.UnmountLayerResponse;
import dev.flatpull.pagecache.CacheStats;
import dev.flatpull.pagecache.PageCache;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.logging.Level;
import java.util.logging.Logger;

/** The FUSE manager's gRPC face over a {@link LayerServer}. */
public final class FuseManagerService extends FuseManagerGrpc.FuseManagerImplBase {
  private static final Logger LOG = Logger.getLogger(FuseManagerService.class.getName());
  private final LayerServer server;
  private final Path root;
  private final String version;
  // Ends the process without unmounting, once retired; null: this manager cannot be retired.
  private final Runnable exit;
  private final Retirement retirement = new Retirement();
  /** How long a retiring manager lets the calls in progress run (a mount may fetch its TOC). */
  static final java.time.Duration RETIRE_PATIENCE = java.time.Duration.ofSeconds(30);

  /**
   * A service that refuses {@code Retire}.
   *
   * @param root the snapshotter's root: the only place the service mounts and unmounts layers
   */
  public FuseManagerService(LayerServer server, Path root, String version) {
    this(server, root, version, null);
  }

  /** @param exit ends this process without unmounting, once retired ({@code Retire}) */
  public FuseManagerService(LayerServer server, Path root, String version, Runnable exit) {
    this.server = server;
    this.root = root;
    this.version = version;
    this.exit = exit;
  }

  /** Whether a call may run; if not, it has been answered ABORTED. {@link Retirement#leave} follows a true. */
  private boolean enter(StreamObserver<?> out) {
    if (retirement.enter()) {
      return true;
    }
    out.onError(Status.ABORTED.withDescription("this FUSE manager hands over to another: ask again")
        .asRuntimeException());
    return false;
  }

  @Override
  public void retire(RetireRequest r, StreamObserver<RetireResponse> out) {
    long self = ProcessHandle.current().pid();
    if (exit == null || r.getPid() != self) {
      out.onError(Status.FAILED_PRECONDITION.withDescription(exit == null ? "this FUSE manager cannot be retired"
          : "this is FUSE manager " + self + ", not " + r.getPid()).asRuntimeException());
      return;
    }
    LOG.info("FUSE manager " + r.getSuccessorPid() + " serves every mount: letting the calls in progress finish, then"
        + " exiting without unmounting");
    out.onNext(RetireResponse.getDefaultInstance());
    out.onCompleted();
    Thread t = new Thread(() -> {
      try {
        if (!retirement.retire(RETIRE_PATIENCE)) {
          LOG.warning("calls still in progress after " + RETIRE_PATIENCE.toSeconds() + " s; exiting all the same");
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      exit.run();
    }, "flatpull-retire");
    t.start();
  }

  @Override
  public void mount(MountLayerRequest r, StreamObserver<MountLayerResponse> out) {
    if (!enter(out)) {
      return;
    }
    try {
      java.util.Optional<dev.flatpull.fetcher.oci.ImageManifest> manifest = java.util.Optional.empty();
      if (!r.getImageManifest().isEmpty()) {
        if (!(dev.flatpull.fetcher.oci.OciDocuments.parse(r.getImageManifest().toByteArray(),
            r.getImageManifestMediaType()) instanceof dev.flatpull.fetcher.oci.ImageManifest m)) {
          throw new java.io.IOException("the manifest given for " + r.getImageRef() + " is not an image manifest");
        }
        manifest = java.util.Optional.of(m);
      }
      LayerServer.Served s;
      if (r.getTakeOver()) {
        // Resolved through its parent: until it is taken over, an access to the mount point itself waits.
        Path asked = Path.of(r.getMountPoint()).toAbsolutePath().normalize();
        if (asked.getParent() == null) {
          throw new java.io.IOException("no mount point to take over at " + asked);
        }
        s = server.takeOver(confined(asked.getParent()).resolve(asked.getFileName()), r.getImageRef(),
            r.getLayerDescriptorJson());
      } else {
        s = server.mount(confined(Path.of(r.getMountPoint())), r.getImageRef(), r.getLayerDescriptorJson(),
            manifest);
      }
      out.onNext(MountLayerResponse.newBuilder().setEntries(s.entries()).setFormat(s.format()).build());
      out.onCompleted();
    } catch (Exception | StackOverflowError e) {
      // A hostile layer may fail in any way; the manager refuses it and keeps serving every other layer.
      LOG.log(Level.WARNING, "mounting at " + r.getMountPoint() + " failed", e);
      out.onError(Status.UNAVAILABLE.withDescription(String.valueOf(e.getMessage())).asRuntimeException());
    } finally {
      retirement.leave();
    }
  }

  @Override
  public void expect(dev.flatpull.manager.api.v1.ExpectLayerRequest r,
      StreamObserver<dev.flatpull.manager.api.v1.ExpectLayerResponse> out) {
    if (!enter(out)) {
      return;
    }
    try {
      boolean started = server.expect(r.getImageRef(), r.getLayerDescriptorJson());
      out.onNext(dev.flatpull.manager.api.v1.ExpectLayerResponse.newBuilder().setStarted(started).build());
      out.onCompleted();
    } catch (Exception e) {
      // Only a head start refused: the layer's Mount opens it as ever.
      LOG.fine(() -> "expecting a layer of " + r.getImageRef() + " refused: " + e.getMessage());
      out.onError(Status.INVALID_ARGUMENT.withDescription(String.valueOf(e.getMessage())).asRuntimeException());
    } finally {
      retirement.leave();
    }
  }

  @Override
  public void unmount(UnmountLayerRequest r, StreamObserver<UnmountLayerResponse> out) {
    if (!enter(out)) {
      return;
    }
    try {
      server.unmount(confined(Path.of(r.getMountPoint())));
      out.onNext(UnmountLayerResponse.getDefaultInstance());
      out.onCompleted();
    } catch (Exception e) {
      LOG.log(Level.WARNING, "unmounting " + r.getMountPoint() + " failed", e);
      out.onError(Status.INTERNAL.withDescription(String.valueOf(e.getMessage())).asRuntimeException());
    } finally {
      retirement.leave();
    }
  }

  /**
   * {@code mountPoint}, absolute, if it lies inside the snapshotter's root (where the daemon puts remote snapshots),
   * symbolic links resolved. The manager runs as root and answers whoever can reach its socket: it must not be a way
   * to mount a layer over, or unmount, any other path of the node.
   */
  private Path confined(Path mountPoint) throws IOException {
    Path root = real(this.root);
    Path key = real(mountPoint);
    if (key.equals(root) || !key.startsWith(root)) {
      throw new IOException("mount point " + mountPoint + " is outside the snapshotter's root " + root + ": refused");
    }
    return mountPoint.toAbsolutePath().normalize();
  }

  /** {@code p} with symbolic links resolved as far as it exists (a stale mount point may be gone). */
  private static Path real(Path p) throws IOException {
    Path abs = p.toAbsolutePath().normalize();
    Path existing = abs;
    while (existing != null && !Files.exists(existing)) {
      existing = existing.getParent();
    }
    if (existing == null) {
      return abs;
    }
    try {
      return existing.toRealPath().resolve(existing.relativize(abs)).normalize();
    } catch (IOException e) {
      // A stale FUSE mount (ENOTCONN) cannot be resolved: its parent can.
      Path parent = existing.getParent();
      return parent == null ? abs : parent.toRealPath().resolve(parent.relativize(abs)).normalize();
    }
  }

  @Override
  public void startRecording(StartRecordingRequest r, StreamObserver<StartRecordingResponse> out) {
    if (!enter(out)) {
      return;
    }
    try {
      out.onNext(StartRecordingResponse.newBuilder().addAllNotes(server.startRecording()).build());
      out.onCompleted();
    } finally {
      retirement.leave();
    }
  }

  @Override
  public void stopRecording(StopRecordingRequest r, StreamObserver<StopRecordingResponse> out) {
    if (!enter(out)) {
      return;
    }
    try {
      out.onNext(StopRecordingResponse.newBuilder()
          .setLayersJson(TraceFile.layersToJson(server.stopRecording())).build());
      out.onCompleted();
    } catch (IllegalStateException notRecording) {
      out.onError(Status.FAILED_PRECONDITION.withDescription(notRecording.getMessage()).asRuntimeException());
    } finally {
      retirement.leave();
    }
  }

  @Override
  public void emptyCache(dev.flatpull.manager.api.v1.EmptyCacheRequest r,
      StreamObserver<dev.flatpull.manager.api.v1.EmptyCacheResponse> out) {
    if (!enter(out)) {
      return;
    }
    try {
      PageCache.Emptied e = server.emptyCache();
      out.onNext(dev.flatpull.manager.api.v1.EmptyCacheResponse.newBuilder()
          .setDiskEntries(e.diskEntries()).setDiskBytes(e.diskBytes()).setMemoryEntries(e.memoryEntries()).build());
      out.onCompleted();
    } catch (java.io.IOException e) {
      LOG.log(Level.WARNING, "emptying the page cache failed", e);
      out.onError(Status.INTERNAL.withDescription(String.valueOf(e.getMessage())).asRuntimeException());
    } finally {
      retirement.leave();
    }
  }

  @Override
  public void status(StatusRequest r, StreamObserver<StatusResponse> out) {
    CacheStats c = server.cacheStats();
    StatusResponse.Builder b = StatusResponse.newBuilder()
        .setPid(ProcessHandle.current().pid())
        .setVersion(version)
        .setRegistryRequests(server.fetched().totalRequests())
        .setRegistryBytes(server.fetched().totalBytes())
        .setCacheHits(c.memoryHits() + c.diskHits() + c.reservationHits())
        .setCacheMisses(c.misses());
    for (LayerServer.Served s : server.served()) {
      b.addLayers(MountedLayer.newBuilder().setMountPoint(s.mountPoint().toString())
          .setLayerDigest(s.layer().digest().toString()).setImageRef(s.imageRef()));
    }
    out.onNext(b.build());
    out.onCompleted();
  }
}
