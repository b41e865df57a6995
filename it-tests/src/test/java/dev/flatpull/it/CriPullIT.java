package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.it.cri.v1.ImageServiceGrpc;
import dev.flatpull.it.cri.v1.ImageSpec;
import dev.flatpull.it.cri.v1.ImageStatusRequest;
import dev.flatpull.it.cri.v1.ImageStatusResponse;
import dev.flatpull.it.cri.v1.PullImageRequest;
import dev.flatpull.it.cri.v1.PullImageResponse;
import dev.flatpull.it.cri.v1.RemoveImageRequest;
import dev.flatpull.it.cri.v1.RuntimeServiceGrpc;
import dev.flatpull.it.cri.v1.VersionRequest;
import dev.flatpull.it.cri.v1.VersionResponse;
import dev.flatpull.endpoints.grpc.UnixSockets;
import io.grpc.ManagedChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The Kubernetes path end to end, without a kubelet: Debian ships no {@code crictl}, so the test is the CRI client,
 * calling containerd's CRI plugin over gRPC as the kubelet does. containerd's CRI is configured as docs/kubernetes.md
 * says (flatpull as its snapshotter, image labels passed); the pull returns with the layers mounted lazily, and a
 * container of the CRI-pulled image runs on them.
 */
class CriPullIT {
  private static final Cleanup cleanup = new Cleanup();
  private static RegistryServer registry;
  private static LinkEmulator link;
  private static FlatpullDaemon flatpull;
  private static ContainerdServer containerd;
  private static ManagedChannel channel;
  private static String image;
  private static int metricsPort;

  @BeforeAll
  static void start() throws Exception {
    Processes.require("runc");
    registry = cleanup.add(RegistryServer.start());
    DebianImage.pushPythonEstargz(registry.address(), "it/python");
    // Through a counting link: the bytes every client took from the registry, containerd's and flatpull's.
    link = cleanup.add(LinkEmulator.start(registry.address(), LinkEmulator.Link.parse("1ms/10gbit")));
    image = link.address() + "/it/python:esgz";
    metricsPort = Processes.freePort();
    flatpull = cleanup.add(FlatpullDaemon.start("metrics_address = \"127.0.0.1:" + metricsPort + "\""));
    containerd = cleanup.add(ContainerdServer.withFlatpullForCri(flatpull.socket(), link.address()));
    channel = UnixSockets.connect(containerd.socket());
    cleanup.add(() -> channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS));
  }

  @AfterAll
  static void stop() throws Exception {
    cleanup.close();
  }

  @Test
  void pullThroughCri_servesTheLayersLazily_andAContainerRunsOnThem() throws Exception {
    VersionResponse version = RuntimeServiceGrpc.newBlockingStub(channel).withDeadlineAfter(30, TimeUnit.SECONDS)
        .version(VersionRequest.newBuilder().setVersion("v1").build());
    assertEquals("containerd", version.getRuntimeName(), version.toString());

    ImageServiceGrpc.ImageServiceBlockingStub images =
        ImageServiceGrpc.newBlockingStub(channel).withDeadlineAfter(300, TimeUnit.SECONDS);
    ImageSpec spec = ImageSpec.newBuilder().setImage(image).build();
    link.mark();
    PullImageResponse pulled = images.pullImage(PullImageRequest.newBuilder().setImage(spec).build());
    LinkEmulator.Counts atPull = link.sinceMark();
    assertTrue(pulled.getImageRef().startsWith("sha256:"), pulled.toString());
    ImageStatusResponse status = images.imageStatus(ImageStatusRequest.newBuilder().setImage(spec).build());
    assertEquals(pulled.getImageRef(), status.getImage().getId());
    long imageBytes = status.getImage().getSize();

    assertEquals(1.0, metric("flatpull_remote_snapshots_total"), flatpull.log());
    List<Path> fuse = dev.flatpull.core.MountTable.read().stream()
        .filter(m -> m.point().startsWith(flatpull.root()) && m.type().startsWith("fuse"))
        .map(dev.flatpull.core.MountTable.Mount::point).toList();
    assertFalse(fuse.isEmpty(), "the layer is a FUSE mount of flatpull's");
    assertTrue(atPull.bytesDown() < imageBytes / 4, "the pull took " + atPull.bytesDown() + " bytes of an image of "
        + imageBytes + ": " + LinkEmulator.describe(atPull));
    assertTrue(atPull.requests().stream().anyMatch(LinkEmulator.Request::byFlatpull),
        "flatpull read the layer's TOC itself");

    Processes.Result run = containerd.ctrIn("k8s.io", "run", "--rm", "--snapshotter", "flatpull", image, "cri-py",
        "/usr/bin/python3", "-c", "import json; print(json.dumps({'ok': 40 + 2}))");
    assertEquals(0, run.exitCode(), run.stderr());
    assertEquals("{\"ok\": 42}", run.stdout().trim());
    System.out.printf("CRI pull of %s (%d bytes): %d bytes from the registry at pull, %d FUSE mounts; %s%n", image,
        imageBytes, atPull.bytesDown(), fuse.size(), LinkEmulator.describe(atPull));

    images.removeImage(RemoveImageRequest.newBuilder().setImage(spec).build());
    assertEquals("", images.imageStatus(ImageStatusRequest.newBuilder().setImage(spec).build()).getImage().getId(),
        "removed through CRI");
  }

  private static double metric(String name) throws Exception {
    return MetricsEndpoint.sum(new MetricsEndpoint(metricsPort).samples(), name);
  }
}
