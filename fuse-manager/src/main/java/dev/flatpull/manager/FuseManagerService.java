package dev.flatpull.manager;

import dev.flatpull.manager.api.v1.FuseManagerGrpc;
import dev.flatpull.manager.api.v1.MountLayerRequest;
import dev.flatpull.manager.api.v1.MountLayerResponse;
import dev.flatpull.manager.api.v1.MountedLayer;
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
import java.nio.file.Path;
import java.util.logging.Level;
import java.util.logging.Logger;

/** The FUSE manager's gRPC face over a {@link LayerServer}. */
public final class FuseManagerService extends FuseManagerGrpc.FuseManagerImplBase {
  private static final Logger LOG = Logger.getLogger(FuseManagerService.class.getName());
  private final LayerServer server;
  private final String version;

  public FuseManagerService(LayerServer server, String version) {
    this.server = server;
    this.version = version;
  }

  @Override
  public void mount(MountLayerRequest r, StreamObserver<MountLayerResponse> out) {
    try {
      java.util.Optional<dev.flatpull.fetcher.oci.ImageManifest> manifest = java.util.Optional.empty();
      if (!r.getImageManifest().isEmpty()) {
        if (!(dev.flatpull.fetcher.oci.OciDocuments.parse(r.getImageManifest().toByteArray(),
            r.getImageManifestMediaType()) instanceof dev.flatpull.fetcher.oci.ImageManifest m)) {
          throw new java.io.IOException("the manifest given for " + r.getImageRef() + " is not an image manifest");
        }
        manifest = java.util.Optional.of(m);
      }
      LayerServer.Served s = server.mount(Path.of(r.getMountPoint()), r.getImageRef(), r.getLayerDescriptorJson(),
          manifest);
      out.onNext(MountLayerResponse.newBuilder().setEntries(s.entries()).setFormat(s.format()).build());
      out.onCompleted();
    } catch (Exception | StackOverflowError e) {
      // A hostile layer may fail in any way; the manager refuses it and keeps serving every other layer.
      LOG.log(Level.WARNING, "mounting at " + r.getMountPoint() + " failed", e);
      out.onError(Status.UNAVAILABLE.withDescription(String.valueOf(e.getMessage())).asRuntimeException());
    }
  }

  @Override
  public void unmount(UnmountLayerRequest r, StreamObserver<UnmountLayerResponse> out) {
    try {
      server.unmount(Path.of(r.getMountPoint()));
      out.onNext(UnmountLayerResponse.getDefaultInstance());
      out.onCompleted();
    } catch (Exception e) {
      LOG.log(Level.WARNING, "unmounting " + r.getMountPoint() + " failed", e);
      out.onError(Status.INTERNAL.withDescription(String.valueOf(e.getMessage())).asRuntimeException());
    }
  }

  @Override
  public void startRecording(StartRecordingRequest r, StreamObserver<StartRecordingResponse> out) {
    out.onNext(StartRecordingResponse.newBuilder().addAllNotes(server.startRecording()).build());
    out.onCompleted();
  }

  @Override
  public void stopRecording(StopRecordingRequest r, StreamObserver<StopRecordingResponse> out) {
    try {
      out.onNext(StopRecordingResponse.newBuilder()
          .setLayersJson(TraceFile.layersToJson(server.stopRecording())).build());
      out.onCompleted();
    } catch (IllegalStateException notRecording) {
      out.onError(Status.FAILED_PRECONDITION.withDescription(notRecording.getMessage()).asRuntimeException());
    }
  }

  @Override
  public void emptyCache(dev.flatpull.manager.api.v1.EmptyCacheRequest r,
      StreamObserver<dev.flatpull.manager.api.v1.EmptyCacheResponse> out) {
    try {
      PageCache.Emptied e = server.emptyCache();
      out.onNext(dev.flatpull.manager.api.v1.EmptyCacheResponse.newBuilder()
          .setDiskEntries(e.diskEntries()).setDiskBytes(e.diskBytes()).setMemoryEntries(e.memoryEntries()).build());
      out.onCompleted();
    } catch (java.io.IOException e) {
      LOG.log(Level.WARNING, "emptying the page cache failed", e);
      out.onError(Status.INTERNAL.withDescription(String.valueOf(e.getMessage())).asRuntimeException());
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
