package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Await;
import dev.flatpull.snapshotter.api.snapshots.v1.CommitSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.Info;
import dev.flatpull.snapshotter.api.snapshots.v1.Kind;
import dev.flatpull.snapshotter.api.snapshots.v1.ListSnapshotsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.PrepareSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.RemoveSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.SnapshotsGrpc;
import dev.flatpull.snapshotter.api.snapshots.v1.StatSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.UpdateSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.UsageRequest;
import dev.flatpull.snapshotter.grpc.SnapshotsProbe;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * containerd pulls a real Debian + python3 image remotely through flatpull (ctr-remote rpull), then runs containers
 * on it with runc: the layers are FUSE mounts served lazily, and only what the containers read is fetched.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class RemoteSnapshotIT {
  private static final Cleanup cleanup = new Cleanup();
  private static RegistryServer registry;
  private static String plainImage;
  private static String layerDigest;
  private static FlatpullDaemon flatpull;
  private static ContainerdServer containerd;
  private static String image;
  private static long imageBytes;
  private static int metricsPort;
  private static int managerMetricsPort;

  @BeforeAll
  static void start() throws Exception {
    Processes.require("runc");
    registry = cleanup.add(RegistryServer.start());
    image = DebianImage.pushPythonEstargz(registry.address(), "it/python");
    plainImage = registry.address() + "/it/python:plain";
    Cli.Run inspect = Cli.inProcess("inspect", "--plain-http", "--json", image);
    var layers = new com.fasterxml.jackson.databind.ObjectMapper().readTree(inspect.out()).path("layers");
    imageBytes = layers.findValues("compressedSize").stream().mapToLong(n -> n.asLong()).sum();
    layerDigest = layers.get(0).path("digest").asText();
    metricsPort = Processes.freePort();
    managerMetricsPort = Processes.freePort();
    flatpull = cleanup.add(FlatpullDaemon.start("metrics_address = \"127.0.0.1:" + metricsPort + "\"\n"
        + "fuse_manager_metrics_address = \"127.0.0.1:" + managerMetricsPort + "\""));
    containerd = cleanup.add(ContainerdServer.withFlatpull(flatpull.socket()));
  }

  @AfterAll
  static void stop() throws Exception {
    cleanup.close();
  }

  @Test
  @Order(1)
  void rpull_servesTheLayerLazily_andRunsPython() throws Exception {
    containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
    String snapshots = containerd.ctrOk("snapshots", "--snapshotter", "flatpull", "ls").stdout();
    assertTrue(snapshots.contains("Committed"), snapshots);
    assertEquals(1.0, metric("flatpull_remote_snapshots_total"), flatpull.log());
    // containerd passed the layer's eStargz annotations as labels: its TOC was asked for with the Prepare, before the
    // manifest was read, and the mount took it once the manifest agreed.
    assertEquals(1.0, MetricsEndpoint.parse(scrape(managerMetricsPort))
        .getOrDefault("flatpull_toc_expected_total{result=\"used\"}", 0.0), scrape(managerMetricsPort));
    // The remote Prepare's timeline, from each process's side, in its log and as histograms (the warm-ups' own
    // synthetic image left out).
    List<String> lines = flatpull.log().lines().filter(l -> !l.contains("/flatpull/warm-up:")).toList();
    assertEquals(1, lines.stream().filter(l -> java.util.regex.Pattern.compile("is served lazily from .*: Prepare"
        + " received, manifest known after \\d+ ms, mounted after \\d+ ms").matcher(l).find()).count(),
        String.join("\n", lines));
    assertEquals(1, lines.stream().filter(l -> java.util.regex.Pattern.compile("TOC fetched and verified in \\d+"
        + " ms, tree built in \\d+ ms, mounted in \\d+ ms, .*its TOC asked for with the Prepare, ahead of the"
        + " manifest").matcher(l).find()).count(), String.join("\n", lines));
    for (String timer : List.of("flatpull_prepare_manifest_seconds_count", "flatpull_prepare_mount_seconds_count",
        "flatpull_layer_toc_seconds_count", "flatpull_layer_tree_seconds_count",
        "flatpull_layer_mount_seconds_count")) {
      assertEquals(1.0, metric(timer), timer);
    }
    // Before any container runs, what containerd's create reads (/etc/passwd, /etc/group) is fetched: the layer has no
    // landmark files and background fetch is off here, so nothing else reaches the page cache.
    Await.until(Duration.ofSeconds(10), () -> metric("flatpull_page_cache_disk_entries") >= 1,
        () -> "nothing prefetched after the pull");
    long afterPull = (long) metric("flatpull_registry_bytes_total");

    Processes.Result run = containerd.ctrPrinting("run", "--rm", "--snapshotter", "flatpull", image, "py1",
        "/usr/bin/python3", "-c", "import json, http.server; print(json.dumps({'ok': 40 + 2}))");
    assertEquals("{\"ok\": 42}", run.stdout().trim());
    long fetched = (long) metric("flatpull_registry_bytes_total");
    System.out.printf("image %d bytes compressed; fetched %d bytes at pull, %d after the one-liner (%.1f%%)%n",
        imageBytes, afterPull, fetched, 100.0 * fetched / imageBytes);
    assertTrue(fetched < imageBytes / 4, "fetched " + fetched + " of " + imageBytes);
    assertTrue(fetched > 0);
    // containerd's calls, timed by method: the pull's Stat and Prepare (a remote one, answered AlreadyExists, so no
    // Commit), the run's Prepare and Mounts (its Remove comes with containerd's collection, later).
    Map<String, Double> daemon = MetricsEndpoint.parse(scrape(metricsPort));
    for (String method : List.of("Prepare", "Mounts", "Stat")) {
      assertTrue(daemon.getOrDefault("flatpull_snapshots_calls_seconds_count{method=\"" + method + "\"}", 0.0) >= 1,
          method + " in " + daemon.keySet());
    }
    assertTrue(daemon.get("flatpull_snapshots_calls_seconds_sum{method=\"Prepare\"}") > 0);
  }

  /** {@code flatpull cache empty} on a running node: the next start fetches again, and served layers keep working. */
  @Test
  @Order(2)
  void cacheEmpty_onARunningNode_makesTheNextStartFetchAgain() throws Exception {
    String[] oneLiner = {"/usr/bin/python3", "-c", "import json, http.server; print(json.dumps({'ok': 40 + 2}))"};
    long before = (long) metric("flatpull_registry_bytes_total");
    // Written behind.
    Await.until(Duration.ofSeconds(10), () -> metric("flatpull_page_cache_disk_entries") > 0,
        () -> "the first start left content in the page cache");
    double entries = metric("flatpull_page_cache_disk_entries");
    assertTrue(entries > 0, "the first start left content in the page cache");

    // As a user types it: the launcher, a shared option before the subcommand.
    Cli.Run r = Cli.launcher("--config", flatpull.config().toString(), "cache", "empty");

    assertEquals(0, r.exitCode(), r.stderr());
    // Netty warns about SO_KEEPALIVE on every unix-socket channel unless its logger is quieted.
    assertFalse(r.stderr().contains("WARNING") || r.stderr().contains("Unknown channel option"), r.stderr());
    java.util.regex.Matcher m = java.util.regex.Pattern.compile("^emptied the FUSE manager's page cache: (\\d+) entries")
        .matcher(r.out());
    assertTrue(m.find(), r.out());
    // At least what the metric showed: emptying first waits for the disk writes still queued.
    assertTrue(Long.parseLong(m.group(1)) >= (long) entries, r.out() + " after the metric showed " + entries);
    assertEquals(0.0, metric("flatpull_page_cache_disk_entries"));
    try (var files = Files.list(flatpull.root().resolve("cache/packs"))) {
      assertEquals(0, files.count(), "no pack of entries left on disk");
    }
    Processes.dropCaches(); // the kernel's own copies of the layer's pages
    Processes.Result run = containerd.ctrOk(Stream.concat(Stream.of("run", "--rm", "--snapshotter", "flatpull",
        image, "py-after-empty"), Stream.of(oneLiner)).toArray(String[]::new));
    assertEquals("{\"ok\": 42}", run.stdout().trim());
    assertTrue(metric("flatpull_registry_bytes_total") > before, "the start after emptying fetched again");
  }

  /** Without a running FUSE manager, {@code flatpull cache empty} empties the cache directory itself. */
  @Test
  void cacheEmpty_withoutAFuseManager_emptiesTheDirectory() throws Exception {
    Path root = Files.createTempDirectory("flatpull-cache-root");
    try {
      byte[] content = "cached content".getBytes(java.nio.charset.StandardCharsets.UTF_8);
      try (dev.flatpull.pagecache.PageCache earlier = dev.flatpull.pagecache.PageCache.open(root.resolve("cache"),
          dev.flatpull.config.CacheSettings.DEFAULTS)) {
        earlier.put(dev.flatpull.core.Digest.sha256(content), content);
      }
      Path packs = root.resolve("cache/packs");
      Path config = root.resolve("flatpull.toml");
      Files.writeString(config, "root = \"" + root + "\"\n[snapshotter]\nfuse_manager_socket = \""
          + root.resolve("absent.sock") + "\"\n");

      Cli.Run r = Cli.inProcess("cache", "empty", "--config", config.toString());

      assertEquals(0, r.exitCode(), r.stderr());
      assertTrue(r.out().startsWith("no FUSE manager running; emptied the page cache in "
          + root.resolve("cache") + ": 1 entries (0.0 MiB)"), r.out());
      try (var files = Files.list(packs)) {
        assertEquals(0, files.count());
      }
    } finally {
      Processes.deleteTree(root);
    }
  }

  @Test
  @Order(2)
  void theStateIsTheOwnersOnly_andAContainerOfAnotherUserStillWritesItsTmp() throws Exception {
    java.nio.file.Path root = flatpull.root();
    assertEquals("rwx------", java.nio.file.attribute.PosixFilePermissions.toString(
        java.nio.file.Files.getPosixFilePermissions(root)));
    // As an unprivileged user, the snapshots (container upper directories, layer trees) cannot even be listed: the
    // root's own mode forbids it (the harness's directory around it is opened up for the check).
    java.nio.file.Files.setPosixFilePermissions(root.getParent(),
        java.nio.file.attribute.PosixFilePermissions.fromString("rwxr-xr-x"));
    Processes.Result ls = Processes.run(List.of("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
        "ls", root.resolve("snapshots").toString()), 30);
    assertNotEquals(0, ls.exitCode(), ls.stdout());
    assertTrue(ls.stderr().contains("Permission denied"), ls.stderr());
    // A container whose process runs as 65534 writes to its own /tmp (its upper directory, behind the 0700 root).
    Processes.Result run = containerd.ctrPrinting("run", "--rm", "--snapshotter", "flatpull", image, "as-nobody",
        "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c",
        "echo written-by-$(id -u) > /tmp/mine && cat /tmp/mine");
    assertEquals("written-by-65534", run.stdout().trim(), run.stderr());
  }

  @Test
  @Order(2)
  void anHttpServerInTheImageAnswers() throws Exception {
    int port = Processes.freePort();
    containerd.ctrOk("run", "-d", "--net-host", "--snapshotter", "flatpull", image, "web",
        "/usr/bin/python3", "-m", "http.server", Integer.toString(port), "--bind", "127.0.0.1", "--directory", "/etc");
    try {
      HttpClient http = HttpClient.newHttpClient();
      HttpResponse<String> r = null;
      for (int i = 0; i < 300; i++) {
        try {
          r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/debian_version"))
              .timeout(Duration.ofSeconds(2)).build(), HttpResponse.BodyHandlers.ofString());
          break;
        } catch (IOException notYet) {
          Thread.sleep(100);
        }
      }
      assertTrue(r != null, "the server never answered");
      assertEquals(200, r.statusCode());
      assertTrue(r.body().startsWith("12"), r.body());
    } finally {
      containerd.removeContainer("web");
    }
  }

  @Test
  @Order(3)
  void ctrSnapshotsPrepareAndRemove() throws Exception {
    String parent = containerd.ctrOk("snapshots", "--snapshotter", "flatpull", "ls").stdout().lines()
        .filter(l -> l.contains("Committed")).map(l -> l.split("\\s+")[0]).findFirst().orElseThrow();
    containerd.ctrOk("snapshots", "--snapshotter", "flatpull", "prepare", "scratch", parent);
    String mounts = containerd.ctrOk("snapshots", "--snapshotter", "flatpull", "mounts", "/mnt", "scratch").stdout();
    assertTrue(mounts.contains("overlay") && mounts.contains(flatpull.root().resolve("remote").toString()), mounts);
    Processes.Result removeParent = containerd.ctr("snapshots", "--snapshotter", "flatpull", "rm", parent);
    assertTrue(removeParent.exitCode() != 0, "a parent with a child was removed");
    containerd.ctrOk("snapshots", "--snapshotter", "flatpull", "rm", "scratch");
    String left = containerd.ctrOk("snapshots", "--snapshotter", "flatpull", "ls").stdout();
    assertFalse(left.contains("scratch"), left);
    assertTrue(left.contains(parent), left);
  }

  /** The kept layer index files in the page cache's directory now. */
  private static List<String> keptIndexes() throws Exception {
    Path named = flatpull.root().resolve("cache").resolve("named");
    if (!Files.isDirectory(named)) {
      return List.of();
    }
    try (var s = Files.list(named)) {
      return s.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("layer-index-")).sorted().toList();
    }
  }

  private static int servedFromKeptIndex() throws IOException {
    return (int) flatpull.log().lines().filter(l -> l.contains("index read from its kept file in")).count();
  }

  @Test
  @Order(4)
  void aRunningContainer_keepsReading_acrossADaemonKill() throws Exception {
    containerd.ctrOk("run", "-d", "--snapshotter", "flatpull", image, "survivor", "/bin/sleep", "600");
    try {
      long managerBefore = flatpull.managerPid();
      flatpull.kill9();
      // Reads while the daemon is dead, of files nothing has read yet: served by the FUSE manager, which lives on.
      Processes.Result during = containerd.ctrOk("task", "exec", "--exec-id", "during", "survivor",
          "/usr/bin/python3", "-c", "import xml.dom.minidom, email.mime.text; print('read while down')");
      assertEquals("read while down", during.stdout().trim());
      flatpull.start();
      assertEquals(managerBefore, flatpull.managerPid(), "the restarted daemon must adopt the running FUSE manager");
      Processes.Result after = containerd.ctrOk("task", "exec", "--exec-id", "after", "survivor",
          "/usr/bin/sha256sum", "/usr/share/common-licenses/GPL-3");
      assertTrue(after.stdout().contains("/usr/share/common-licenses/GPL-3"), after.stdout());
      // A new container works after the restart too, once containerd has reconnected: its gRPC client redials with
      // exponential back-off and fails calls as Unavailable meanwhile, which its callers (kubelet) retry.
      long t0 = System.nanoTime();
      Processes.Result fresh = null;
      for (int i = 0; i < 120; i++) {
        fresh = containerd.ctr("run", "--rm", "--snapshotter", "flatpull", image, "fresh",
            "/usr/bin/python3", "-c", "import sqlite3; print(sqlite3.sqlite_version)");
        if (fresh.exitCode() == 0 || !fresh.stderr().contains("unavailable")) {
          break;
        }
        Thread.sleep(500);
      }
      System.out.printf("containerd reached the restarted daemon after %.1f s%n", (System.nanoTime() - t0) / 1e9);
      assertEquals(0, fresh.exitCode(), fresh.stderr());
      assertTrue(fresh.stdout().trim().startsWith("3."), fresh.stdout());
    } finally {
      containerd.removeContainer("survivor");
    }
  }

  @Test
  @Order(4)
  void aKilledFuseManager_whileTheDaemonRuns_isReplacedAsItExits() throws Exception {
    long before = flatpull.managerPid();
    Processes.run(List.of("kill", "-9", Long.toString(before)), 10).orThrow(List.of("kill"));
    Await.until(Duration.ofSeconds(30), () -> {
      long now = flatpull.managerPid();
      return now > 0 && now != before;
    }, () -> "a manager other than " + before);
    // Noticed by its exit, not at the watchdog's next round.
    assertTrue(flatpull.log().contains("the FUSE manager " + before + " exited; starting another"), flatpull.log());
    // A replacement serves without the warm-up (this node's configuration has none anyway; NodeCrashMatrixIT's has).
    assertTrue(flatpull.log().contains("in place of the one that exited, without its warm-up"), flatpull.log());
    Processes.Result fresh = null;
    for (int i = 0; i < 60; i++) {
      fresh = containerd.ctr("run", "--rm", "--snapshotter", "flatpull", image, "after-manager-exit",
          "/usr/bin/python3", "-c", "import json; print(json.dumps('replaced'))");
      // Until the new manager has mounted the layer again, its mount point is the dead one.
      if (fresh.exitCode() == 0 || !(fresh.stderr().contains("unavailable")
          || fresh.stderr().contains("transport endpoint is not connected"))) {
        break;
      }
      // What the failed attempt left (ctr's container and its snapshot) goes before the next one.
      containerd.ctr("container", "rm", "after-manager-exit");
      containerd.ctr("snapshots", "--snapshotter", "flatpull", "rm", "after-manager-exit");
      Thread.sleep(500);
    }
    assertEquals(0, fresh.exitCode(), fresh.stderr() + flatpull.log());
    assertEquals("\"replaced\"", fresh.stdout().trim());
  }

  @Test
  @Order(4)
  void aKilledFuseManager_isReplaced_andTheLayersMountedAgainFromTheirStoredSource() throws Exception {
    // The layer's index, kept once reads were quiet: the new manager opens the layer from it, not from its TOC.
    Await.until(Duration.ofSeconds(10), () -> !keptIndexes().isEmpty(),
        () -> "no kept index file under " + flatpull.root());
    int servedBefore = servedFromKeptIndex();
    long before = flatpull.managerPid();
    Processes.run(List.of("kill", "-9", Long.toString(before)), 10).orThrow(List.of("kill"));
    flatpull.kill9();
    flatpull.start(); // the daemon's start finds no manager, starts one and mounts every remote snapshot again
    long after = flatpull.managerPid();
    assertTrue(after > 0 && after != before, "a new FUSE manager serves: " + before + " -> " + after);
    long t0 = System.nanoTime();
    Processes.Result fresh = null;
    for (int i = 0; i < 120; i++) {
      fresh = containerd.ctr("run", "--rm", "--snapshotter", "flatpull", image, "after-manager",
          "/usr/bin/python3", "-c", "import json; print(json.dumps('remounted'))");
      if (fresh.exitCode() == 0 || !fresh.stderr().contains("unavailable")) {
        break;
      }
      Thread.sleep(500);
    }
    assertEquals(0, fresh.exitCode(), fresh.stderr() + flatpull.log());
    assertEquals("\"remounted\"", fresh.stdout().trim());
    assertTrue(servedFromKeptIndex() > servedBefore, "the remount read the layer's kept index file\n" + flatpull.log());
    System.out.printf("after a FUSE manager crash: new manager, layers remounted, container ran %.1f s later%n",
        (System.nanoTime() - t0) / 1e9);
  }

  @Test
  @Order(5)
  void aFullPull_andARemotePullOfAPlainImage_downloadTheLayer() throws Exception {
    containerd.ctrOk("image", "pull", "--plain-http", "--snapshotter", "flatpull", plainImage);
    Processes.Result run = containerd.ctrPrinting("run", "--rm", "--snapshotter", "flatpull", plainImage, "full",
        "/bin/cat", "/etc/debian_version");
    assertTrue(run.stdout().startsWith("12"), run.stdout());
    containerd.ctrOk("image", "rm", "--sync", plainImage);
    double before = fallbacks("plain_layer");
    containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", plainImage);
    assertEquals(before + 1, fallbacks("plain_layer"), "a plain layer is downloaded, and the fallback counted");
    assertTrue(flatpull.log().lines().anyMatch(l -> l.contains("is downloaded, not served lazily")
        && l.matches(".*layer sha256:[0-9a-f]{64}.*")), "one log line says why and names the layer");
    run = containerd.ctrPrinting("run", "--rm", "--snapshotter", "flatpull", plainImage, "full2", "/bin/cat",
        "/etc/debian_version");
    assertTrue(run.stdout().startsWith("12"), run.stdout());
    containerd.ctrOk("image", "rm", "--sync", plainImage);
  }

  @Test
  @Order(6)
  void aRegistryThatFailsDuringTheRemotePrepare_fallsBack_andLeaksNothing() throws Exception {
    // As on a node that has not kept the layer's index: the mount must fetch its TOC, which the registry cuts off.
    for (String kept : keptIndexes()) {
      Files.delete(flatpull.root().resolve("cache").resolve("named").resolve(kept));
    }
    // Manifests pass through to the real registry; every blob request is cut off, so mounting the layer fails.
    com.sun.net.httpserver.HttpServer proxy = com.sun.net.httpserver.HttpServer.create(
        new java.net.InetSocketAddress("127.0.0.1", 0), 0);
    HttpClient upstream = HttpClient.newHttpClient();
    proxy.createContext("/", exchange -> {
      try (exchange) {
        if (exchange.getRequestURI().getPath().contains("/blobs/")) {
          return; // closed without a response
        }
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://" + registry.address()
            + exchange.getRequestURI())).method(exchange.getRequestMethod(), HttpRequest.BodyPublishers.noBody());
        String accept = exchange.getRequestHeaders().getFirst("Accept");
        if (accept != null) {
          b.header("Accept", accept);
        }
        HttpResponse<byte[]> r = upstream.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
        r.headers().firstValue("Content-Type").ifPresent(v -> exchange.getResponseHeaders().set("Content-Type", v));
        r.headers().firstValue("Docker-Content-Digest")
            .ifPresent(v -> exchange.getResponseHeaders().set("Docker-Content-Digest", v));
        exchange.sendResponseHeaders(r.statusCode(), r.body().length == 0 ? -1 : r.body().length);
        exchange.getResponseBody().write(r.body());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    proxy.start();
    var channel = dev.flatpull.endpoints.grpc.UnixSockets.connect(flatpull.socket());
    try {
      double before = fallbacks("mount_failed");
      String ref = "127.0.0.1:" + proxy.getAddress().getPort() + "/it/python:esgz";
      var api = SnapshotsGrpc.newBlockingStub(channel);
      var mounts = api.prepare(PrepareSnapshotRequest.newBuilder()
          .setKey("default/9/extract-vanishing").putLabels("containerd.io/snapshot.ref", "default/9/vanishing-target")
          .putLabels("containerd.io/snapshot/cri.image-ref", ref)
          .putLabels("containerd.io/snapshot/cri.layer-digest", layerDigest).build()).getMountsList();
      assertEquals("bind", mounts.get(0).getType(), "an ordinary snapshot, for containerd to download into");
      assertEquals(before + 1, fallbacks("mount_failed"));
      try (var s = Files.list(flatpull.root().resolve("remote"))) {
        assertEquals(List.of(), s.filter(p -> !isServed(p)).toList(), "a failed mount left its mount point");
      }
      api.remove(RemoveSnapshotRequest.newBuilder()
          .setKey("default/9/extract-vanishing").build());
    } finally {
      channel.shutdownNow();
      proxy.stop(0);
    }
  }

  @Test
  @Order(6)
  void crisLabels_withTheManifestDigest_makeARemoteSnapshot() throws Exception {
    String manifest = new com.fasterxml.jackson.databind.ObjectMapper().readTree(
        Cli.inProcess("inspect", "--plain-http", "--json", image).out()).path("manifestDigest").asText();
    assertTrue(manifest.startsWith("sha256:"), manifest);
    var channel = dev.flatpull.endpoints.grpc.UnixSockets.connect(flatpull.socket());
    try {
      var api = SnapshotsGrpc.newBlockingStub(channel);
      double before = metric("flatpull_remote_snapshots_total");
      io.grpc.StatusRuntimeException e = org.junit.jupiter.api.Assertions.assertThrows(
          io.grpc.StatusRuntimeException.class, () -> api.prepare(
              PrepareSnapshotRequest.newBuilder()
                  .setKey("k8s.io/1/extract-cri").putLabels("containerd.io/snapshot.ref", "k8s.io/2/cri-target")
                  .putLabels("containerd.io/snapshot/cri.image-ref", image.replace(":esgz", "@" + manifest))
                  .putLabels("containerd.io/snapshot/cri.manifest-digest", manifest)
                  .putLabels("containerd.io/snapshot/cri.layer-digest", layerDigest)
                  .putLabels("containerd.io/snapshot/cri.image-layers", layerDigest).build()));
      assertEquals(io.grpc.Status.Code.ALREADY_EXISTS, e.getStatus().getCode(), e.toString());
      assertEquals(before + 1, metric("flatpull_remote_snapshots_total"));
      var info = api.stat(StatSnapshotRequest.newBuilder()
          .setKey("k8s.io/2/cri-target").build()).getInfo();
      assertEquals("remote snapshot", info.getLabelsOrThrow("containerd.io/snapshot/remote"));
      api.remove(RemoveSnapshotRequest.newBuilder()
          .setKey("k8s.io/2/cri-target").build());
    } finally {
      channel.shutdownNow();
    }
  }

  /**
   * containerd's Info rules (SnapshotInfoTest, and containerd's own suite in bin/conformance, which makes only local
   * snapshots) for a lazily pulled layer and a container's snapshot on it, over the Snapshots API as containerd's
   * proxy plugin calls it: Stat, Walk with filters, Update, Usage and Commit.
   */
  @Test
  @Order(6)
  void aRemoteLayer_andAContainersSnapshotOnIt_keepContainerdsInfoRules() throws Exception {
    String manifest = new com.fasterxml.jackson.databind.ObjectMapper().readTree(
        Cli.inProcess("inspect", "--plain-http", "--json", image).out()).path("manifestDigest").asText();
    var channel = dev.flatpull.endpoints.grpc.UnixSockets.connect(flatpull.socket());
    try {
      var api = SnapshotsGrpc.newBlockingStub(channel);
      String layer = "k8s.io/3/info-layer";
      java.time.Instant beforePrepare = java.time.Instant.now();
      io.grpc.StatusRuntimeException e = org.junit.jupiter.api.Assertions.assertThrows(
          io.grpc.StatusRuntimeException.class, () -> api.prepare(
              PrepareSnapshotRequest.newBuilder()
                  .setKey("k8s.io/3/extract-info").putLabels("containerd.io/snapshot.ref", layer)
                  .putLabels("containerd.io/snapshot/cri.image-ref", image.replace(":esgz", "@" + manifest))
                  .putLabels("containerd.io/snapshot/cri.manifest-digest", manifest)
                  .putLabels("containerd.io/snapshot/cri.layer-digest", layerDigest)
                  .putLabels("containerd.io/snapshot/cri.image-layers", layerDigest).build()));
      assertEquals(io.grpc.Status.Code.ALREADY_EXISTS, e.getStatus().getCode(), e.toString());
      java.time.Instant afterPrepare = java.time.Instant.now();

      // Stat: committed, created = updated = the Prepare's time, marked remote.
      var info = stat(api, layer);
      assertEquals(Kind.COMMITTED, info.getKind());
      assertEquals(info.getCreatedAt(), info.getUpdatedAt());
      assertTrue(!instant(info.getCreatedAt()).isBefore(beforePrepare.minusMillis(1))
          && !instant(info.getCreatedAt()).isAfter(afterPrepare), info.toString());
      assertEquals("remote snapshot", info.getLabelsOrThrow("containerd.io/snapshot/remote"));
      assertEquals(layer, info.getLabelsOrThrow("containerd.io/snapshot.ref"));
      // Usage: the layer holds nothing of its own on the node (its content is in the shared page cache).
      var usage = api.usage(UsageRequest.newBuilder().setKey(layer).build());
      assertEquals(0, usage.getSize());
      assertEquals(0, usage.getInodes());

      // A container's snapshot on the layer.
      String container = "k8s.io/3/info-container";
      var mounts = api.prepare(PrepareSnapshotRequest.newBuilder()
          .setKey(container).setParent(layer).putLabels("from-prepare", "p").build()).getMountsList();
      String upper = mounts.get(0).getOptionsList().stream().filter(o -> o.startsWith("upperdir=")).findFirst()
          .orElseThrow().substring("upperdir=".length());
      assertTrue(mounts.get(0).getOptionsList().stream().anyMatch(o -> o.startsWith("lowerdir=")
          && o.contains(flatpull.root().resolve("remote").toString())), mounts.toString());
      Files.writeString(Path.of(upper, "written"), "x".repeat(10_000));
      var containerUsage = api.usage(
          UsageRequest.newBuilder().setKey(container).build());
      assertTrue(containerUsage.getSize() >= 10_000, containerUsage.toString());
      assertEquals(2, containerUsage.getInodes(), "the upper directory and the file written");
      assertEquals(layer, stat(api, container).getParent());

      // Walk with filters: by the remote marker, by parent, by kind and name.
      assertEquals(List.of(layer), walk(api, "labels.\"containerd.io/snapshot/remote\",name~=info"));
      assertEquals(List.of(container), walk(api, "parent==\"" + layer + "\""));
      assertEquals(List.of(container), walk(api, "kind==active,name==\"" + container + "\""));
      assertEquals(List.of(), walk(api, "kind==committed,name==\"" + container + "\""));

      // Update: a label of the layer set, the update dated, nothing else changed; an immutable path refused.
      var updated = api.update(UpdateSnapshotRequest.newBuilder()
          .setInfo(info.toBuilder().putLabels("team", "a").setParent("elsewhere"))
          .setUpdateMask(com.google.protobuf.FieldMask.newBuilder().addPaths("labels.team")).build()).getInfo();
      assertEquals("a", updated.getLabelsOrThrow("team"));
      assertEquals("remote snapshot", updated.getLabelsOrThrow("containerd.io/snapshot/remote"));
      assertEquals(info.getCreatedAt(), updated.getCreatedAt());
      assertTrue(instant(updated.getUpdatedAt()).isAfter(instant(info.getUpdatedAt())), updated.toString());
      assertEquals("", updated.getParent());
      assertEquals(updated, stat(api, layer));
      io.grpc.StatusRuntimeException immutable = org.junit.jupiter.api.Assertions.assertThrows(
          io.grpc.StatusRuntimeException.class, () -> api.update(
              UpdateSnapshotRequest.newBuilder()
                  .setInfo(stat(api, container).toBuilder().setParent(""))
                  .setUpdateMask(com.google.protobuf.FieldMask.newBuilder().addPaths("parent")).build()));
      assertEquals(io.grpc.Status.Code.INVALID_ARGUMENT, immutable.getStatus().getCode());
      assertEquals(layer, stat(api, container).getParent());

      // Commit of the container's snapshot: created = updated = the commit's time, only the commit's labels.
      java.time.Instant beforeCommit = java.time.Instant.now();
      api.commit(CommitSnapshotRequest.newBuilder().setKey(container)
          .setName("k8s.io/3/info-committed").putLabels("from-commit", "c").build());
      var committed = stat(api, "k8s.io/3/info-committed");
      assertEquals(committed.getCreatedAt(), committed.getUpdatedAt());
      assertTrue(!instant(committed.getCreatedAt()).isBefore(beforeCommit.minusMillis(1)), committed.toString());
      assertEquals(Map.of("from-commit", "c"), committed.getLabelsMap());
      assertEquals(layer, committed.getParent());
      assertTrue(api.usage(UsageRequest.newBuilder()
          .setKey("k8s.io/3/info-committed").build()).getSize() >= 10_000);

      for (String key : List.of("k8s.io/3/info-committed", layer)) {
        api.remove(RemoveSnapshotRequest.newBuilder().setKey(key).build());
      }
    } finally {
      channel.shutdownNow();
    }
  }

  private static Info stat(
      SnapshotsGrpc.SnapshotsBlockingStub api, String key) {
    return api.stat(StatSnapshotRequest.newBuilder().setKey(key).build())
        .getInfo();
  }

  private static List<String> walk(SnapshotsGrpc.SnapshotsBlockingStub api,
      String filter) {
    List<String> names = new java.util.ArrayList<>();
    api.list(ListSnapshotsRequest.newBuilder().addFilters(filter).build())
        .forEachRemaining(r -> r.getInfoList().forEach(i -> names.add(i.getName())));
    return names;
  }

  private static java.time.Instant instant(com.google.protobuf.Timestamp t) {
    return java.time.Instant.ofEpochSecond(t.getSeconds(), t.getNanos());
  }

  private static boolean isServed(Path p) {
    try {
      return dev.flatpull.core.MountTable.isMountPoint(p);
    } catch (IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  private static double fallbacks(String reason) throws IOException, InterruptedException {
    String body = scrape(metricsPort);
    String prefix = "flatpull_remote_fallbacks_total{reason=\"" + reason + "\"} ";
    return body.lines().filter(l -> l.startsWith(prefix)).mapToDouble(l -> Double.parseDouble(l.substring(prefix.length())))
        .findFirst().orElse(0);
  }

  @Test
  @Order(7)
  void imageRemoval_andGarbageCollection_removeTheSnapshotsAndMounts() throws Exception {
    containerd.ctrOk("image", "rm", "--sync", image);
    Await.until(Duration.ofSeconds(10), () -> SnapshotsProbe.count(flatpull.socket()) == 0,
        () -> "snapshots left in flatpull after image rm and GC");
    Await.until(Duration.ofSeconds(10), () -> keptIndexes().isEmpty(),
        () -> "a removed layer's kept index file goes with it");
    assertEquals(List.of(), dev.flatpull.core.MountTable.under(flatpull.root()));
    try (var s = Files.list(flatpull.root().resolve("remote"))) {
      assertEquals(0, s.count());
    }
  }

  @Test
  @Order(8)
  void aDaemonKilledBetweenMountingALayerAndRecordingIt_leavesNoMountAfterRestart() throws Exception {
    flatpull.kill9();
    flatpull.start(List.of("-Dflatpull.crashpoint=REMOTE_MOUNTED"));
    // Until containerd has redialled the daemon and the pull reaches the crash point.
    for (int i = 0; i < 120 && flatpull.isAlive(); i++) {
      Processes.Result pull = containerd.ctr("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
      assertTrue(pull.exitCode() != 0, "the pull cannot succeed: the daemon halts in the middle of it\n"
          + flatpull.log());
      Thread.sleep(500);
    }
    assertEquals(137, flatpull.awaitExit());
    assertEquals(1, Files.list(flatpull.root().resolve("remote")).count(), "the crash left a mounted layer");
    flatpull.start();
    try (var s = Files.list(flatpull.root().resolve("remote"))) {
      assertEquals(0, s.count(), "the restart removes the unrecorded mount");
    }
    assertEquals(List.of(), dev.flatpull.core.MountTable.under(flatpull.root()), "no mount of the crash is left");
    for (int i = 0; i < 120; i++) { // until containerd has redialled the restarted daemon
      if (containerd.ctr("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image).exitCode() == 0) {
        break;
      }
      Thread.sleep(500);
    }
    Processes.Result run = containerd.ctrPrinting("run", "--rm", "--snapshotter", "flatpull", image, "again",
        "/usr/bin/python3", "-c", "print('again')");
    assertEquals("again", run.stdout().trim());
    containerd.ctrOk("image", "rm", "--sync", image);
  }

  /** The sum of every sample of {@code name} (over its tags) on the daemon's and the FUSE manager's endpoints. */
  private static double metric(String name) throws IOException, InterruptedException {
    String body = scrape(metricsPort) + scrape(managerMetricsPort);
    if (body.lines().noneMatch(l -> l.startsWith(name + " ") || l.startsWith(name + "{"))) {
      throw new AssertionError(name + " not in\n" + body);
    }
    // Both processes export some names (registry traffic): each endpoint is summed on its own.
    return MetricsEndpoint.sum(MetricsEndpoint.parse(scrape(metricsPort)), name)
        + MetricsEndpoint.sum(MetricsEndpoint.parse(scrape(managerMetricsPort)), name);
  }

  private static String scrape(int port) throws IOException, InterruptedException {
    return new MetricsEndpoint(port).text();
  }

}
