package dev.flatpull.snapshotter.remote;

import dev.flatpull.manager.client.FuseManagerClient;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.OciDocument;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fuse.DeviceHolder;
import dev.flatpull.manager.api.v1.MountLayerResponse;
import dev.flatpull.manager.api.v1.MountedLayer;
import dev.flatpull.snapshotter.overlay.HostMounts;
import dev.flatpull.snapshotter.overlay.RemoteDecision;
import dev.flatpull.snapshotter.overlay.RemoteLayers;
import dev.flatpull.snapshotter.store.RemoteSource;
import java.io.IOException;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BiConsumer;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;
import java.util.logging.Logger;

/**
 * Remote layers as the daemon sees them: which layer the labels name (looked up in the image's manifest, fetched once
 * per image and pull), whether it can be served lazily, and the FUSE manager that serves it.
 */
public final class RegistryRemoteLayers implements RemoteLayers {
  private static final Logger LOG = Logger.getLogger(RegistryRemoteLayers.class.getName());
  // Long enough for one pull's Prepares (one after another) to share a tag lookup; short enough that a pull of the
  // same tag minutes later sees where the tag points then.
  static final long MANIFEST_TTL_NANOS = TimeUnit.MINUTES.toNanos(5);

  private record CachedManifest(ImageManifest manifest, ImageReference pinned, long fetchedAt) {}

  private final RegistryClients clients;
  private final Platform platform;
  private final FuseManagerClient manager;
  private final LongSupplier nanoTime;
  private final DeviceHolder devices;
  // An unpack prepares every layer of one image in turn: its manifest is fetched once.
  private final Map<String, CachedManifest> manifests = new ConcurrentHashMap<>();
  private final BiConsumer<ImageReference, Descriptor> ahead;

  /** @param nanoTime the monotonic clock a fetched manifest ages by */
  public RegistryRemoteLayers(RegistryClients clients, Platform platform, FuseManagerClient manager,
      LongSupplier nanoTime) {
    this(clients, platform, manager, nanoTime, DeviceHolder.NONE);
  }

  /** @param devices the daemon's hold on the manager's mounts' devices: what a new manager can take over */
  public RegistryRemoteLayers(RegistryClients clients, Platform platform, FuseManagerClient manager,
      LongSupplier nanoTime, DeviceHolder devices) {
    this(clients, platform, manager, nanoTime, devices, null);
  }

  /**
   * @param ahead asks for a layer's TOC ahead of its manifest, without waiting for an answer; null: the manager
   */
  RegistryRemoteLayers(RegistryClients clients, Platform platform, FuseManagerClient manager, LongSupplier nanoTime,
      DeviceHolder devices, BiConsumer<ImageReference, Descriptor> ahead) {
    this.clients = clients;
    this.platform = platform;
    this.manager = manager;
    this.nanoTime = nanoTime;
    this.devices = devices;
    this.ahead = ahead != null ? ahead : this::expectOfManager;
  }

  @Override
  public RemoteDecision decide(Map<String, String> labels) {
    RemoteLabels asked;
    try {
      Optional<RemoteLabels> parsed = RemoteLabels.parse(labels);
      if (parsed.isEmpty()) {
        return RemoteDecision.notRequested();
      }
      asked = parsed.get();
    } catch (IllegalArgumentException e) {
      return RemoteDecision.fallback("malformed_labels", "malformed remote labels: " + e.getMessage());
    }
    CachedManifest m;
    try {
      if (asked.described().isPresent() && cached(asked, nanoTime.getAsLong()).isEmpty()) {
        ahead.accept(asked.image(), asked.described().get());
      }
      m = manifest(asked);
    } catch (IOException e) {
      return RemoteDecision.fallback("registry_unreachable",
          "layer " + asked.layer() + ": cannot read the manifest of " + asked.image() + ": " + e.getMessage());
    }
    Optional<Descriptor> layer = m.manifest().layers().stream().filter(d -> d.digest().equals(asked.layer())).findFirst();
    if (layer.isEmpty()) {
      return RemoteDecision.fallback("layer_not_in_manifest",
          "manifest " + m.manifest().digest() + " of " + asked.image() + " has no layer " + asked.layer());
    }
    try {
      if (LayerFormat.of(layer.get()) == LayerFormat.PLAIN) {
        return RemoteDecision.fallback("plain_layer", "layer " + asked.layer() + " (" + layer.get().mediaType()
            + ") has no verifiable table of contents (not eStargz or zstd:chunked)");
      }
    } catch (IOException e) {
      return RemoteDecision.fallback("unsupported_media_type", "layer " + asked.layer() + ": " + e.getMessage());
    }
    return RemoteDecision.serve(new RemoteSource(m.pinned().toString(), OciDocuments.writeDescriptor(layer.get())));
  }

  /**
   * Asks the manager to open the layer's TOC as its labels describe it, before this Prepare reads the manifest: the
   * first Prepare of an image does not wait for two round trips before its TOC is asked for. The request is on its way
   * (before the mount's) when this returns; a manager not running, or refusing, leaves the TOC to the mount.
   */
  private void expectOfManager(ImageReference image, Descriptor described) {
    try {
      manager.expect(image.toString(), OciDocuments.writeDescriptor(described));
    } catch (RuntimeException e) {
      // A hint never fails the Prepare.
      LOG.fine(() -> "layer " + described.digest() + " not expected ahead of its manifest: " + e);
    }
  }

  private static String key(RemoteLabels asked) {
    return asked.image() + "|" + asked.manifest().map(Digest::toString).orElse("");
  }

  /** The manifest fetched for {@code asked} within its time to live, if it lists the layer asked for. */
  private Optional<CachedManifest> cached(RemoteLabels asked, long now) {
    CachedManifest c = manifests.get(key(asked));
    return c != null && now - c.fetchedAt() < MANIFEST_TTL_NANOS
        && c.manifest().layers().stream().anyMatch(d -> d.digest().equals(asked.layer())) ? Optional.of(c)
        : Optional.empty();
  }

  private CachedManifest manifest(RemoteLabels asked) throws IOException {
    String key = key(asked);
    long now = nanoTime.getAsLong();
    Optional<CachedManifest> c = cached(asked, now);
    if (c.isPresent()) {
      return c.get();
    }
    var client = clients.client(asked.image());
    ImageManifest manifest;
    if (asked.manifest().isPresent()) {
      OciDocument doc = client.fetchManifest(asked.manifest().get().toString());
      if (!(doc instanceof ImageManifest im)) {
        throw new IOException("manifest " + asked.manifest().get() + " is an index, not an image manifest");
      }
      manifest = im;
    } else {
      manifest = client.resolve(asked.image(), platform).manifest();
    }
    // Pinned to the manifest's digest: a tag moved later must not change what a stored snapshot serves.
    ImageReference pinned = asked.image().withDigest(manifest.digest());
    CachedManifest fresh = new CachedManifest(manifest, pinned, now);
    manifests.values().removeIf(m -> now - m.fetchedAt() >= MANIFEST_TTL_NANOS);
    manifests.put(key, fresh);
    return fresh;
  }

  @Override
  public void mount(RemoteSource source, Path mountPoint) throws IOException {
    manager.ensureRunning();
    // The manifest this Prepare was decided on, so that the manager needs no request for it (none at a remount).
    Optional<ImageManifest> manifest = manifests.values().stream().map(CachedManifest::manifest)
        .filter(m -> source.imageRef().endsWith("@" + m.digest())).findFirst();
    MountLayerResponse r;
    try {
      r = manager.mount(mountPoint, source.imageRef(), source.descriptorJson(), manifest);
    } catch (IOException e) {
      // The line that says the layer is pulled whole instead names it.
      throw new IOException("layer " + OciDocuments.parseDescriptor(source.descriptorJson()).digest() + " of "
          + source.imageRef() + ": " + e.getMessage(), e);
    }
    LOG.fine(() -> "mounted " + r.getEntries() + " entries (" + r.getFormat() + ") at " + mountPoint);
  }

  @Override
  public void unmount(Path mountPoint) throws IOException {
    try {
      manager.unmount(mountPoint);
    } catch (IOException e) {
      // The manager is gone or stuck: detach the mount ourselves so the directory can be removed.
      LOG.warning("the FUSE manager did not unmount " + mountPoint + " (" + e.getMessage() + "); detaching it");
      HostMounts.detach(mountPoint);
    } finally {
      devices.drop(mountPoint);
    }
  }

  @Override
  public boolean held(Path mountPoint) {
    return devices.holds(mountPoint);
  }

  @Override
  public void takeOver(RemoteSource source, Path mountPoint) throws IOException {
    manager.ensureRunning();
    MountLayerResponse r = manager.takeOver(mountPoint, source.imageRef(), source.descriptorJson());
    LOG.fine(() -> "took over " + r.getEntries() + " entries (" + r.getFormat() + ") at " + mountPoint);
  }

  @Override
  public void release(Path mountPoint) {
    devices.drop(mountPoint);
  }

  @Override
  public Set<Path> served() throws IOException {
    Set<Path> out = new HashSet<>();
    for (MountedLayer l : manager.ensureRunning().getLayersList()) {
      out.add(Path.of(l.getMountPoint()));
    }
    return out;
  }

  public FuseManagerClient manager() {
    return manager;
  }
}
