package dev.flatpull.snapshotter.remote;

import dev.flatpull.snapshotter.warmup.LoopbackRegistry;
import dev.flatpull.snapshotter.warmup.WarmUp;
import dev.flatpull.manager.client.FuseManagerClient;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.fetcher.layer.EstargzTail;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.RequestKind;
import dev.flatpull.snapshotter.overlay.RemoteDecision;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The daemon's decision for a remote Prepare, against a real registry client and a loopback registry. */
class RegistryRemoteLayersTest {
  @TempDir Path dir;

  @Test
  void oneTagLookupServesEveryLayerOfAPull_andATagMovedLaterIsSeenOnceTheManifestHasAged() throws Exception {
    List<WarmUp.Layer> first = WarmUp.syntheticLayers(dir);
    AtomicInteger manifestRequests = new AtomicInteger();
    FetchListener counting = countingManifests(manifestRequests);
    AtomicLong now = new AtomicLong(42);
    try (LoopbackRegistry registry = LoopbackRegistry.start();
        RegistryClients clients = RegistryClients.create(WarmUp.config(dir.resolve("root")), counting)) {
      WarmUp.serveImage(registry, first);
      ImageReference ref = ImageReference.parse(registry.address() + "/" + WarmUp.REPOSITORY + ":latest");
      RegistryRemoteLayers layers = new RegistryRemoteLayers(clients, Platform.current(),
          new FuseManagerClient(dir.resolve("no-manager.sock"), List.of(), dir.resolve("no-manager.log")), now::get);

      RemoteDecision a = layers.decide(labels(ref, first.get(0)));
      RemoteDecision b = layers.decide(labels(ref, first.get(1)));
      assertTrue(a.source().isPresent(), a.detail());
      assertTrue(b.source().isPresent(), b.detail());
      assertEquals(1, manifestRequests.get(), "both layers of one pull share one tag lookup");
      String pinned = a.source().get().imageRef();
      assertTrue(pinned.contains("@sha256:"), pinned);
      assertEquals(pinned, b.source().get().imageRef());

      // The tag moves to another image that has the first layer too (its manifest lists that one alone).
      WarmUp.serveImage(registry, List.of(first.get(0)));
      now.addAndGet(RegistryRemoteLayers.MANIFEST_TTL_NANOS - 1);
      assertEquals(pinned, layers.decide(labels(ref, first.get(0))).source().get().imageRef(),
          "within its time to live the manifest fetched is kept");
      assertEquals(1, manifestRequests.get());

      now.addAndGet(1);
      RemoteDecision later = layers.decide(labels(ref, first.get(0)));
      assertEquals(2, manifestRequests.get(), "an aged manifest is fetched again");
      assertNotEquals(pinned, later.source().get().imageRef(), "and the tag's new manifest pins the layer");
    }
  }

  @Test
  void anImagesFirstPrepare_asksForItsLayersTocBeforeReadingTheManifest_asItsLabelsDescribeIt() throws Exception {
    WarmUp.Layer estargz = WarmUp.syntheticLayers(dir).get(0);
    AtomicInteger manifestRequests = new AtomicInteger();
    FetchListener counting = countingManifests(manifestRequests);
    List<String> asked = new java.util.ArrayList<>();
    List<Descriptor> described = new java.util.ArrayList<>();
    try (LoopbackRegistry registry = LoopbackRegistry.start();
        RegistryClients clients = RegistryClients.create(WarmUp.config(dir.resolve("root")), counting)) {
      WarmUp.serveImage(registry, List.of(estargz));
      ImageReference ref = ImageReference.parse(registry.address() + "/" + WarmUp.REPOSITORY + ":latest");
      RegistryRemoteLayers layers = new RegistryRemoteLayers(clients, Platform.current(),
          new FuseManagerClient(dir.resolve("no-manager.sock"), List.of(), dir.resolve("no-manager.log")),
          new AtomicLong()::get, dev.flatpull.fuse.DeviceHolder.NONE, (image, d) -> {
            asked.add(image + " after " + manifestRequests.get() + " manifest requests");
            described.add(d);
          });
      // As containerd's unpacker sends them: the layer's annotations under containerd.io/snapshot/ come along.
      Map<String, String> labels = new java.util.HashMap<>(labels(ref, estargz));
      estargz.descriptor().annotations().forEach((k, v) -> {
        if (k.startsWith("containerd.io/snapshot/")) {
          labels.put(k, v);
        }
      });

      RemoteDecision first = layers.decide(labels);
      assertTrue(first.source().isPresent(), first.detail());
      assertEquals(List.of(ref + " after 0 manifest requests"), asked);
      assertTrue(EstargzTail.describes(described.get(0), estargz.descriptor()), described.get(0).toString());

      layers.decide(labels);
      assertEquals(1, asked.size(), "a Prepare that finds the manifest read already asks for nothing ahead");
      layers.decide(labels(ref, estargz));
      assertEquals(1, asked.size());
    }
  }

  private static FetchListener countingManifests(AtomicInteger manifestRequests) {
    return new FetchListener() {
      @Override
      public void requestFinished(RequestKind kind, String host, int status, long bytes, Duration elapsed) {
        if (kind == RequestKind.MANIFEST) {
          manifestRequests.incrementAndGet();
        }
      }
    };
  }

  private static Map<String, String> labels(ImageReference ref, WarmUp.Layer layer) {
    return Map.of(RemoteLabels.STARGZ_REFERENCE, ref.toString(),
        RemoteLabels.STARGZ_DIGEST, layer.descriptor().digest().toString());
  }
}
