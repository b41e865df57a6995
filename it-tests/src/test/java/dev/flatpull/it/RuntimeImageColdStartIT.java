package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Await;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.Referrers;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.runtimeimage.HostileRuntimeImages.Hostile;
import dev.flatpull.runtimeimage.HostileRuntimeImages;
import dev.flatpull.runtimeimage.RuntimeImageArtifact;
import dev.flatpull.runtimeimage.RuntimeImageDecoder;
import dev.flatpull.runtimeimage.RuntimeImageFormat;
import dev.flatpull.runtimeimage.RuntimeImageIndex;
import dev.flatpull.runtimeimage.RuntimeImagePublisher;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.Trace;
import dev.flatpull.trace.TraceFile;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.Set;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Cold starts with a runtime image, end to end: recorded, built and pushed to a real registry (distribution 2.8, so
 * the referrers tag schema), then, on a wiped node (fresh containerd, flatpull state and page cache, kernel caches
 * dropped), a cold start through containerd and FUSE with flatpull's default configuration. Every request the
 * registry sees passes through a {@link LinkEmulator} on loopback, which counts them (and holds back, or cuts, the
 * ones a test names). Checked: requests and bytes before readiness, the runtime-image hit ratio, the served bytes
 * against the root file system the image was built from, incremental reuse of content a node already has, a
 * container that starts while the stream is held back, and bad runtime images that each fall back to the lazy loader
 * without one wrong byte.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class RuntimeImageColdStartIT {
  private static final String PYTHON_A = "import json, http.server, email.parser, urllib.request, decimal, logging";
  private static final String PYTHON_B = "import json, sqlite3, csv, argparse, decimal";
  private static final Cleanup cleanup = new Cleanup();
  private static RegistryServer registry;
  private static LinkEmulator link;
  private static String python;
  private static String http;
  private static Path dir;
  private static Trace tracePythonA;
  private static Trace tracePythonB;
  private static Trace traceHttp;
  private static RegistryClients clients;

  @BeforeAll
  static void start() throws Exception {
    Processes.require("runc");
    Processes.require("curl");
    registry = cleanup.add(RegistryServer.start());
    link = cleanup.add(LinkEmulator.start(registry.address(), LinkEmulator.Link.parse("1ms/10gbit")));
    python = DebianImage.pushPythonEstargz(link.address(), "it/python");
    ImageReference plain = DebianImage.pushRootfs(DebianImage.nginxRootfs(), link.address(), "it/http", "plain");
    http = plain.withTag("esgz").toString();
    Cli.Run convert = Cli.inProcess("convert", "--plain-http", "--quiet", plain.toString(), http);
    assertEquals(0, convert.exitCode(), convert.stderr());
    dir = Files.createTempDirectory(Path.of("/var/tmp"), "fp-ri-coldstart-");
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    clients = new RegistryClients(config, dev.flatpull.config.RegistryCredentials.NONE, FetchListener.NONE,
        Sleeper.SYSTEM, InstantSource.system());

    // Recorded in CI, as users do: one recording node, then gone.
    try (FlatpullDaemon recorder = FlatpullDaemon.start("");
        ContainerdServer containerd = ContainerdServer.withFlatpull(recorder.socket())) {
      tracePythonA = record(recorder, containerd, python, "a", List.of("exit"),
          List.of("/usr/bin/python3", "-c", PYTHON_A));
      tracePythonB = record(recorder, containerd, python, "b", List.of("exit"),
          List.of("/usr/bin/python3", "-c", PYTHON_B));
      traceHttp = record(recorder, containerd, http, "http", List.of("http://127.0.0.1:80/"),
          List.of("/usr/sbin/nginx", "-g", "daemon off;"));
    }
  }

  @AfterAll
  static void stop() throws Exception {
    if (clients != null) {
      clients.close();
    }
    cleanup.close();
    if (dir != null) {
      Processes.deleteTree(dir);
    }
  }

  private static Trace record(FlatpullDaemon d, ContainerdServer c, String image, String name, List<String> probes,
      List<String> command) throws Exception {
    Path out = dir.resolve(name + ".fptrace");
    List<String> args = new ArrayList<>(List.of("record", "--config", d.config().toString(), "--plain-http",
        "--containerd-address", c.socket().toString(), "--namespace", ContainerdServer.NAMESPACE,
        "--out", out.toString(), "--probe-timeout", "90s", "--push-runtime-image"));
    for (String p : probes) {
      args.addAll(List.of("--probe", p));
    }
    args.add(image);
    args.add("--");
    args.addAll(command);
    Cli.Run r = Cli.inProcess(args.toArray(String[]::new));
    assertEquals(0, r.exitCode(), r.stderr());
    return TraceFile.read(out);
  }

  /** A wiped node: fresh containerd, fresh flatpull root (so a fresh page cache unless {@code cache} names one). */
  private record Node(FlatpullDaemon flatpull, ContainerdServer containerd, int metricsPort, int daemonMetricsPort)
      implements AutoCloseable {
    static Node fresh(String runtimeImageToml, Optional<Path> cache) throws Exception {
      return fresh(runtimeImageToml, cache, true);
    }

    /**
     * Without the processes' warm-ups when {@code warmUp} is false: for starts whose checks are what was fetched and
     * served, not how fast (the warm-ups took 10-12 s of each such node's 15).
     */
    static Node fresh(String runtimeImageToml, Optional<Path> cache, boolean warmUp) throws Exception {
      int port = Processes.freePort();
      int daemonPort = Processes.freePort();
      FlatpullDaemon d = FlatpullDaemon.start("fuse_manager_metrics_address = \"127.0.0.1:" + port + "\"\n"
          + "metrics_address = \"127.0.0.1:" + daemonPort + "\"" + (warmUp ? "" : "\nwarm_up = false"), true,
          "[runtime_image]\n" + runtimeImageToml + "\n"
              + cache.map(c -> "[cache]\ndirectory = \"" + c + "\"\n").orElse(""));
      ContainerdServer c;
      try {
        d.awaitManager();
        c = ContainerdServer.withFlatpull(d.socket());
      } catch (Exception e) {
        d.close();
        throw e;
      }
      return new Node(d, c, port, daemonPort);
    }

    /** The FUSE manager's metrics, and the daemon's (prefixed {@code daemon:}). */
    Map<String, Double> metrics() throws Exception {
      Map<String, Double> all = new java.util.TreeMap<>(new MetricsEndpoint(metricsPort).samples());
      new MetricsEndpoint(daemonMetricsPort).samples().forEach((k, v) -> all.put("daemon:" + k, v));
      return all;
    }

    @Override
    public void close() throws Exception {
      containerd.close();
      flatpull.close();
    }
  }

  /** What a cold start did: the requests from flatpull's first to readiness, bytes down, and the metrics then. */
  private record Start(List<LinkEmulator.Request> requests, long bytesDown, Map<String, Double> before,
      Map<String, Double> atReady, long readyMillis) {
    double delta(String sample) {
      return atReady.getOrDefault(sample, 0.0) - before.getOrDefault(sample, 0.0);
    }

    double hitRatio() {
      double ri = delta("flatpull_content_served_bytes_total{source=\"runtime_image\"}");
      double lazy = delta("flatpull_content_served_bytes_total{source=\"lazy\"}");
      return ri + lazy == 0 ? 0 : ri / (ri + lazy);
    }

    String describe() {
      StringBuilder b = new StringBuilder(String.format(java.util.Locale.ROOT,
          "ready after %d ms, %d requests from flatpull's first, %.2f MB down, hit ratio %.3f%n", readyMillis,
          requests.size(), bytesDown / 1e6, hitRatio()));
      requests.forEach(r -> b.append("  ").append(r.method()).append(' ').append(r.path()).append(' ')
          .append(r.range()).append(r.byFlatpull() ? "" : " (containerd)").append('\n'));
      return b.toString();
    }
  }

  private static Start coldStart(Node n, String image, String id, List<String> command, boolean httpProbe)
      throws Exception {
    Map<String, Double> before = n.metrics();
    Processes.dropCaches();
    link.mark();
    long t0 = System.nanoTime();
    n.containerd().ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
    if (httpProbe) {
      List<String> cmd = new ArrayList<>(List.of("run", "-d", "--net-host", "--snapshotter", "flatpull", image, id));
      cmd.addAll(command);
      n.containerd().ctrOk(cmd.toArray(String[]::new));
      Processes.awaitHttp200("http://127.0.0.1:80/", Duration.ofSeconds(90));
    } else {
      List<String> cmd = new ArrayList<>(List.of("run", "--rm", "--snapshotter", "flatpull", image, id));
      cmd.addAll(command);
      n.containerd().ctrOk(cmd.toArray(String[]::new));
    }
    long ready = (System.nanoTime() - t0) / 1_000_000;
    LinkEmulator.Counts counts = link.sinceMark();
    Map<String, Double> atReady = n.metrics();
    if (httpProbe) {
      n.containerd().removeContainer(id);
    }
    List<LinkEmulator.Request> all = counts.requests();
    int first = 0;
    while (first < all.size() && !all.get(first).byFlatpull()) {
      first++;
    }
    return new Start(List.copyOf(all.subList(first, all.size())), counts.bytesDown(), before, atReady, ready);
  }

  private static Start pythonStart(Node n, String id, String code) throws Exception {
    return coldStart(n, python, id, List.of("/usr/bin/python3", "-c", code), false);
  }

  /** Every file the service read, as served through the layer's mount now, equals the root file system's. */
  private static void assertServedFilesMatch(Node n, Trace trace, Path rootfs) throws IOException {
    Path remote = n.flatpull().root().resolve("remote");
    List<Path> mounts;
    try (var s = Files.list(remote)) {
      mounts = s.toList();
    }
    assertEquals(1, mounts.size(), "one-layer image: " + mounts);
    int files = 0;
    for (LayerTrace lt : trace.layers()) {
      for (String f : lt.files()) {
        byte[] served = Files.readAllBytes(mounts.get(0).resolve(f.substring(1)));
        byte[] truth = Files.readAllBytes(rootfs.resolve(f.substring(1)));
        assertTrue(Arrays.equals(truth, served), f + " differs from the root file system");
        files++;
      }
    }
    assertTrue(files > 10, "the service read " + files + " files");
  }

  /** The whole layer as served, against the root file system: no wrong byte anywhere. */
  private static void assertWholeTreeMatches(Node n, Path rootfs) throws IOException {
    Path remote = n.flatpull().root().resolve("remote");
    Path mount;
    try (var s = Files.list(remote)) {
      mount = s.findFirst().orElseThrow();
    }
    List<String> diff = TreeSnapshot.of(rootfs).differences(TreeSnapshot.of(mount), 10);
    assertEquals(List.of(), diff, "served tree differs from the root file system");
  }

  /**
   * Every file an extent of {@code index} names, as served through the layer's mount, against the root file system:
   * the only files whose bytes a runtime image can bring, so a bad one put no wrong byte anywhere if these match (the
   * rest of the tree comes from the lazy loader alone, which the whole-tree checks above cover). A file the image does
   * not have stays absent.
   */
  private static void assertFilesOfExtentsMatch(Node n, RuntimeImageIndex index, Path rootfs) throws IOException {
    Path mount;
    try (var s = Files.list(n.flatpull().root().resolve("remote"))) {
      mount = s.findFirst().orElseThrow();
    }
    int checked = 0;
    int absent = 0;
    for (RuntimeImageIndex.LayerExtents l : index.layers()) {
      Set<String> named = new java.util.TreeSet<>();
      l.extents().forEach(e -> named.add(l.files().get(e.file())));
      for (String f : named) {
        Path truth = rootfs.resolve(f.substring(1));
        Path served = mount.resolve(f.substring(1));
        if (Files.isRegularFile(truth, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
          assertTrue(Arrays.equals(Files.readAllBytes(truth), Files.readAllBytes(served)),
              f + " differs from the root file system");
          checked++;
        } else {
          assertFalse(Files.isRegularFile(served, java.nio.file.LinkOption.NOFOLLOW_LINKS), f + " is not in the image");
          absent++;
        }
      }
    }
    assertTrue(checked > 0 && checked + absent > 10, "the runtime image names " + checked + " of the image's files and "
        + absent + " others");
  }

  private static long tocBytes(Start s) {
    return s.requests().stream().filter(r -> r.byFlatpull() && r.kind().equals("blob-range")).mapToLong(
        LinkEmulator.Request::rangeLength).filter(n -> n > 0).findFirst().orElse(0);
  }

  private static RegistryClient client(String image) {
    return clients.client(ImageReference.parse(image));
  }

  private static ImageManifest manifest(String image) throws IOException {
    return client(image).resolve(ImageReference.parse(image), dev.flatpull.fetcher.oci.Platform.current()).manifest();
  }

  private static RuntimeImagePublisher publisher(String image) {
    RegistryClient c = client(image);
    return RuntimeImagePublisher.of(c);
  }

  private static RuntimeImageArtifact artifactOf(String image, Trace trace) throws IOException {
    return publisher(image).list(manifest(image).digest()).stream()
        .filter(a -> a.serviceKey().equals(trace.service().key())).findFirst()
        .orElseThrow(() -> new AssertionError("no runtime image of service " + trace.service().key()));
  }

  private static byte[] blobOf(String image, RuntimeImageArtifact a) throws IOException {
    return publisher(image).fetch(a, manifest(image).digest(), dir.resolve("work"));
  }

  @Test
  @Order(1)
  void python_coldStartWithItsRuntimeImage_sixRequests_hitRatioAbove95_bytesNearTheRuntimeImage() throws Exception {
    byte[] blob = blobOf(python, artifactOf(python, tracePythonA));
    try (Node n = Node.fresh("service = \"" + tracePythonA.service().key() + "\"", Optional.empty())) {
      Start s = pythonStart(n, "py-ri", PYTHON_A);
      assertStartedFromItsRuntimeImage("python", python, n, s, blob);
      // Service B's runtime image was pushed after A's: the configured service wins, B is passed over and counted.
      assertEquals(1.0, s.delta("flatpull_runtime_image_passed_over_total{reason=\"other_service\"}"),
          n.flatpull().log());
      assertTrue(n.flatpull().log().contains("passed over: "), n.flatpull().log());
      // How close it came to the limits its image sets (docs/runtime-images.md, "Limits").
      String log = n.flatpull().log();
      String headroom = log.lines().filter(l -> l.contains(" of the image's ")).findFirst()
          .orElseThrow(() -> new AssertionError("no headroom logged:\n" + log));
      System.out.println("python, runtime image: " + headroom.substring(headroom.lastIndexOf("; index ") + 2));
      assertServedFilesMatch(n, tracePythonA, DebianImage.pythonRootfs());
    }
  }

  @Test
  @Order(2)
  void http_coldStartWithItsRuntimeImage_sixRequests_hitRatioAbove95_bytesNearTheRuntimeImage() throws Exception {
    byte[] blob = blobOf(http, artifactOf(http, traceHttp));
    try (Node n = Node.fresh("", Optional.empty())) {
      assertStartedFromItsRuntimeImage("http", http, n,
          coldStart(n, http, "http-ri", List.of("/usr/sbin/nginx", "-g", "daemon off;"), true), blob);
      assertServedFilesMatch(n, traceHttp, DebianImage.nginxRootfs());
    }
  }

  /** A one-layer image's start from its runtime image {@code blob}: loaded, at most 6 requests, hit ratio, bytes. */
  private static void assertStartedFromItsRuntimeImage(String what, String image, Node n, Start s, byte[] blob)
      throws IOException {
    System.out.print(what + ", runtime image: " + s.describe());
    assertEquals(1.0, s.delta("flatpull_runtime_image_lookups_total{result=\"loaded\"}"), n.flatpull().log());
    // The manifest, the TOC, the referrers API and tag at once, then the runtime image the listing names (no artifact
    // manifest): its head and frames while the TOC is still on its way, or all of it in one response when the TOC came
    // first.
    assertTrue(s.requests().size() <= 6, "at most 6 requests from the first Prepare to readiness: " + s.describe()
        + n.flatpull().log());
    assertLookupOrder(s, manifest(image));
    assertTrue(s.hitRatio() >= 0.95, "runtime-image hit ratio " + s.hitRatio() + ": " + s.describe());
    long bound = (long) (1.3 * (blob.length + tocBytes(s)));
    assertTrue(s.bytesDown() <= bound, s.bytesDown() + " bytes before ready, more than 1.3 x (runtime image "
        + blob.length + " + TOC " + tocBytes(s) + ")");
  }

  /**
   * The order of a runtime-image start's requests, as the registry's side of the link saw them: the image's manifest
   * and the TOC first, in either order (the daemon asks for the TOC with the Prepare, beside its manifest fetch, when
   * the layer's labels describe it, as the converter's do), the manifest before the lookup; the TOC and the lookup
   * (referrers API and tag) both before the runtime image's blob is asked for, the lookup's two requests together
   * (neither waits for the other's answer); then the blob the listing names, right after them, with no artifact
   * manifest between.
   */
  private static void assertLookupOrder(Start s, ImageManifest image) {
    java.util.Set<String> layers = new java.util.HashSet<>();
    image.layers().forEach(l -> layers.add("/blobs/" + l.digest()));
    List<String> kinds = new ArrayList<>();
    for (LinkEmulator.Request r : s.requests()) {
      String p = r.path();
      kinds.add(p.contains("/referrers/") ? "referrers" : p.contains("/manifests/sha256-") ? "tag"
          : p.contains("/manifests/sha256:") ? "artifact" : p.contains("/manifests/") ? "manifest"
          : r.kind().equals("blob-range") && layers.stream().anyMatch(p::endsWith) ? "toc"
          : r.kind().equals("blob-range") ? "runtime-image" : r.kind());
    }
    String order = kinds + "\n" + s.describe();
    assertTrue(List.of("manifest", "toc").contains(kinds.get(0)), order);
    assertTrue(kinds.indexOf("manifest") >= 0 && kinds.indexOf("manifest") <= 1, order);
    int manifest = kinds.indexOf("manifest");
    assertTrue(manifest < kinds.indexOf("referrers") && manifest < kinds.indexOf("tag"),
        "the lookup needs the manifest's digest: " + order);
    assertFalse(kinds.contains("artifact"), "the listing names the blob: no artifact manifest: " + order);
    int blob = kinds.indexOf("runtime-image");
    assertTrue(blob > 0, order);
    int lastBefore = 0;
    for (String before : List.of("toc", "referrers", "tag")) {
      int at = kinds.indexOf(before);
      assertTrue(at >= 0 && at < blob, before + " before the runtime image: " + order);
      lastBefore = Math.max(lastBefore, at);
    }
    assertEquals(lastBefore + 1, blob, "the runtime image right after the lookup: " + order);
  }

  /**
   * The lookup answers only after a second: the container starts meanwhile, its first reads served lazily without
   * waiting for it (no read waits out a stall), and the runtime image still loads once the lookup answers.
   */
  @Test
  @Order(5)
  void lookupDelayedBySecond_firstReadsServedLazilyMeanwhile_noReadWaitsForIt() throws Exception {
    RuntimeImageArtifact a = artifactOf(python, tracePythonA);
    Predicate<LinkEmulator.Request> lookup = r -> r.byFlatpull()
        && (r.path().contains("/referrers/") || r.path().contains("/manifests/sha256-"));
    try (Node n = Node.fresh("service = \"" + a.serviceKey() + "\"", Optional.empty())) {
      link.hold(lookup);
      // The second counts from the lookup's first request, as the link holds it.
      Thread releaser = new Thread(() -> {
        try {
          while (!link.seen(lookup)) {
            Thread.sleep(5);
          }
          Thread.sleep(1000);
          // And until the container's first reads were served, if it got there later (a loaded machine can take more
          // than the second to pull, create and exec): the reads this tests are those the lookup has not answered.
          long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
          while (n.metrics().getOrDefault("flatpull_content_served_bytes_total{source=\"lazy\"}", 0.0) == 0
              && System.nanoTime() < deadline) {
            Thread.sleep(20);
          }
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        } catch (Exception unreadable) {
          // The metrics could not be read: released now, and the test's assertions say what happened.
        } finally {
          link.releaseHeld();
        }
      }, "lookup-releaser");
      releaser.start();
      Start s;
      try {
        s = pythonStart(n, "py-slow-lookup", PYTHON_A);
      } finally {
        releaser.join(10_000);
        link.releaseHeld();
      }
      System.out.print("python, lookup delayed by 1 s: " + s.describe());
      assertTrue(s.delta("flatpull_content_served_bytes_total{source=\"lazy\"}") > 0, "first reads lazily: "
          + s.describe());
      assertFalse(n.flatpull().log().contains("no longer wait for its runtime image"),
          "a read waited for the lookup:\n" + n.flatpull().log());
      // Once the lookup answers, the runtime image loads (what the lazy loader brought meanwhile is reused).
      Await.until(Duration.ofSeconds(30),
          () -> n.metrics().getOrDefault("flatpull_runtime_image_lookups_total{result=\"loaded\"}", 0.0) >= 1,
          () -> "the runtime image loaded once the lookup answered");
      assertEquals(1.0, n.metrics().getOrDefault("flatpull_runtime_image_lookups_total{result=\"loaded\"}", 0.0),
          n.flatpull().log());
      assertWholeTreeMatches(n, DebianImage.pythonRootfs());
    }
  }

  @Test
  @Order(3)
  void metricsEndpoint_byCurl_agreesWithTheRegistrysOwnLogAndWithTheTrace() throws Exception {
    RuntimeImageArtifact artifact = artifactOf(python, tracePythonA);
    try (Node n = Node.fresh("service = \"" + tracePythonA.service().key() + "\"", Optional.empty(), false)) {
      Start s = pythonStart(n, "py-metrics", PYTHON_A);
      Processes.Result curl = Processes.run(List.of("curl", "-sf", "http://127.0.0.1:" + n.metricsPort()
          + "/metrics"), 30);
      assertEquals(0, curl.exitCode(), curl.stderr());
      Map<String, Double> scraped = MetricsEndpoint.parse(curl.stdout());
      for (String name : List.of("flatpull_content_served_bytes_total", "flatpull_runtime_image_lookups_total",
          "flatpull_runtime_image_rejected_total", "flatpull_registry_requests_total", "flatpull_registry_bytes_total",
          "flatpull_runtime_image_content_bytes_total", "flatpull_runtime_image_contents_total",
          "flatpull_runtime_image_trace_age_seconds", "flatpull_page_cache_disk_bytes",
          "flatpull_process_resident_bytes", "flatpull_coldstart_first_byte_seconds_count",
          "flatpull_layer_toc_seconds_count", "flatpull_runtime_image_stream_seconds_count")) {
        assertTrue(scraped.keySet().stream().anyMatch(k -> k.equals(name) || k.startsWith(name + "{")),
            name + " not exported:\n" + curl.stdout());
      }
      // Requests and bytes: flatpull's own counters against what the registry received in the same start.
      long flatpullRequests = s.requests().stream().filter(LinkEmulator.Request::byFlatpull).count();
      // A registry's answer other than 2xx (the referrers API's 404 here) counts as a failure, not a request.
      double counted = sum(s, "flatpull_registry_requests_total") + sum(s, "daemon:flatpull_registry_requests_total")
          + s.delta("flatpull_registry_failures_total") + s.delta("daemon:flatpull_registry_failures_total");
      assertEquals(flatpullRequests, (long) counted, "requests counted (FUSE manager and daemon) vs seen by the"
          + " registry: " + s.describe());
      double bytes = sum(s, "flatpull_registry_bytes_total") + sum(s, "daemon:flatpull_registry_bytes_total");
      assertTrue(bytes <= s.bytesDown() && bytes >= 0.9 * s.bytesDown() - 64 * 1024,
          "bytes counted " + bytes + " vs " + s.bytesDown() + " down the link");
      // Pages: the runtime image brought whole chunks covering every traced page.
      double delivered = s.delta("flatpull_runtime_image_content_bytes_total{outcome=\"delivered\"}");
      long tracedBytes = tracePythonA.pages() * 4096;
      assertTrue(delivered >= 0.5 * tracedBytes && delivered <= artifact.size() * 20L,
          "delivered " + delivered + " bytes for " + tracePythonA.pages() + " traced pages");
      assertTrue(s.delta("flatpull_runtime_image_contents_total{outcome=\"delivered\"}") > 0);
      double age = scraped.get("flatpull_runtime_image_trace_age_seconds");
      assertTrue(age >= 0 && age < 3600, "trace age " + age);
      assertEquals(1.0, s.delta("flatpull_coldstart_first_byte_seconds_count"));
    }
  }

  /**
   * The next version of the python image, never recorded: one layer more that spoils the first bytes of a compiled
   * module service A reads (Python then compiles the module from its source) and adds a file. A cold start of it
   * borrows the runtime image of the version before, streams only the frames worth it, and serves every byte of the
   * new image; a lazy start of the same version moves more.
   */
  @Test
  @Order(8)
  void nextVersionNeverRecorded_borrowsThePreviousVersionsRuntimeImage_byContent_andServesItsOwnBytes()
      throws Exception {
    // A repository of its own, where the version before and service A's runtime image are all there is (the other
    // tests publish more runtime images of the python image), so that what is borrowed is known.
    String repository = "it/python-pair";
    String previous = link.address() + "/" + repository + ":esgz";
    Skopeo.copy(List.of("--src-tls-verify=false", "--dest-tls-verify=false", "--preserve-digests",
        "docker://" + python, "docker://" + previous), 300);
    // Service A's runtime image, built there from its trace (the other tests replace the python image's with theirs).
    Cli.Run built = Cli.inProcess("runtime-image", "build", "--plain-http", previous, "--trace",
        dir.resolve("a.fptrace").toString(), "--push");
    assertEquals(0, built.exitCode(), built.stderr());
    byte[] blobA = blobOf(previous, publisher(previous).list(manifest(previous).digest()).get(0));
    RuntimeImageIndex a = RuntimeImageFormat.read(blobA).index();
    Map<String, Long> firstOfA = firstExtents(a);
    String changed = firstOfA.keySet().stream().filter(f -> f.endsWith(".pyc"))
        .max(java.util.Comparator.comparing(firstOfA::get))
        .orElseThrow(() -> new AssertionError("no compiled module in the runtime image"));
    Path rootfs = DebianImage.pythonRootfs();
    byte[] content = Files.readAllBytes(rootfs.resolve(changed.substring(1)));
    content[0] ^= 1;
    DebianImage.pushRootfsWithUpper(rootfs, Map.of(changed.substring(1), content, "srv/added.txt",
        "only in the next version\n".getBytes(java.nio.charset.StandardCharsets.US_ASCII)), link.address(),
        repository, "plain-next");
    String next = link.address() + "/" + repository + ":esgz-next";
    assertEquals(0, Cli.inProcess("convert", "--plain-http", "--quiet", link.address() + "/" + repository
        + ":plain-next", next).exitCode());
    RuntimeImageIndex borrowed = a;
    String code = PYTHON_A;

    Start lazily;
    try (Node n = Node.fresh("load = false", Optional.empty(), false)) {
      lazily = coldStart(n, next, "py-next-lazy", List.of("/usr/bin/python3", "-c", code), false);
    }
    try (Node n = Node.fresh("", Optional.empty(), false)) {
      Start s = coldStart(n, next, "py-next", List.of("/usr/bin/python3", "-c", code), false);
      System.out.print("python's next version, borrowing: " + s.describe() + "lazily: " + lazily.describe());
      String log = n.flatpull().log();
      assertEquals(1.0, s.delta("flatpull_runtime_image_lookups_total{result=\"borrowed\"}"), log);
      String line = log.lines().filter(l -> l.contains(" borrowed for ")).findFirst()
          .orElseThrow(() -> new AssertionError("no borrowing logged:\n" + log));
      System.out.println(line);
      java.util.regex.Matcher m = java.util.regex.Pattern.compile("overlap ([0-9.]+): (\\d+) of (\\d+) bytes matched,"
          + " (\\d+) kept").matcher(line);
      assertTrue(m.find(), line);
      assertEquals(borrowed.servedBytes(), Long.parseLong(m.group(3)), "the borrowed one: " + line);
      assertEquals(borrowed.servedBytes() - firstOfA.get(changed), Long.parseLong(m.group(2)),
          "every byte but the spoilt chunk matched: " + line);
      // Counted once per content (several places may serve one), never beyond what was kept.
      double counted = s.delta("flatpull_runtime_image_borrowed_bytes_total");
      assertTrue(counted > 0 && counted <= Long.parseLong(m.group(4)), counted + " bytes counted: " + line);
      // What the overlap predicts: the service's reads come from the borrowed content but the spoilt module and the
      // source Python compiles instead.
      assertTrue(s.hitRatio() >= 0.9, "hit ratio " + s.hitRatio() + ": " + s.describe());
      assertTrue(s.bytesDown() < lazily.bytesDown(), "borrowing moved " + s.bytesDown() + " bytes, the lazy start "
          + lazily.bytesDown());
      assertTrue(s.requests().size() < lazily.requests().size(), s.describe() + lazily.describe());

      // Every byte the next version's layers show, against what they were built from.
      Path remote = n.flatpull().root().resolve("remote");
      List<Path> mounts;
      try (var list = Files.list(remote)) {
        mounts = list.toList();
      }
      assertEquals(2, mounts.size(), mounts.toString());
      Path lower = mounts.stream().filter(p -> Files.exists(p.resolve("usr/bin"))).findFirst().orElseThrow();
      Path upper = mounts.stream().filter(p -> !p.equals(lower)).findFirst().orElseThrow();
      assertEquals(List.of(), TreeSnapshot.of(rootfs).differences(TreeSnapshot.of(lower), 10));
      assertTrue(Arrays.equals(content, Files.readAllBytes(upper.resolve(changed.substring(1)))), changed);
      assertEquals("only in the next version\n", Files.readString(upper.resolve("srv/added.txt")));
    }
  }

  /** Per file a runtime image serves, the length of its extent at offset 0. */
  private static Map<String, Long> firstExtents(RuntimeImageIndex index) {
    Map<String, Long> out = new java.util.HashMap<>();
    for (RuntimeImageIndex.LayerExtents l : index.layers()) {
      for (RuntimeImageIndex.Extent e : l.extents()) {
        if (e.fileOffset() == 0) {
          out.merge(l.files().get(e.file()), (long) e.length(), Long::sum);
        }
      }
    }
    return out;
  }

  @Test
  @Order(4)
  void incrementalInjection_serviceBAfterServiceA_fetchesOnlyTheFramesANodeLacks() throws Exception {
    Path cache = dir.resolve("shared-cache");
    try (Node a = Node.fresh("service = \"" + tracePythonA.service().key() + "\"", Optional.of(cache), false)) {
      pythonStart(a, "py-a", PYTHON_A);
    }
    RuntimeImageArtifact b = artifactOf(python, tracePythonB);
    byte[] blob = blobOf(python, b);
    RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(blob);
    // Which of B's frames hold content the node lacks, from the page cache the first start left on disk.
    long expectedFrameBytes = 0;
    int needed = 0;
    try (PageCache c = PageCache.open(cache, new CacheSettings(Optional.empty(), 0, 1L << 40, Duration.ofSeconds(1)))) {
      List<List<int[]>> byFrame = RuntimeImageDecoder.extentsByFrame(layout.index());
      for (int f = 0; f < byFrame.size(); f++) {
        boolean missing = false;
        for (int[] le : byFrame.get(f)) {
          missing |= !c.contains(layout.index().layers().get(le[0]).extents().get(le[1]).digest());
        }
        if (missing) {
          expectedFrameBytes += layout.index().frames().get(f).length();
          needed++;
        }
      }
    }
    assertTrue(needed < layout.index().frames().size(), "service A brought some of B's content");
    try (Node nb = Node.fresh("service = \"" + tracePythonB.service().key() + "\"", Optional.of(cache), false)) {
      Start s = pythonStart(nb, "py-b", PYTHON_B);
      System.out.print("python, service B after A: " + s.describe());
      String blobPath = "/blobs/" + b.manifest().digest().toString();
      Digest blobDigest = RuntimeImagePublisher.blobOf(client(python), b, manifest(python).digest()).digest();
      long fetched = s.requests().stream().filter(r -> r.path().endsWith("/blobs/" + blobDigest))
          .mapToLong(LinkEmulator.Request::rangeLength).sum();
      assertEquals(layout.dataStart() + expectedFrameBytes, fetched, "B's index, then only its " + needed + " of "
          + layout.index().frames().size() + " frames holding content the node lacked (" + blobPath + ")");
      assertTrue(s.delta("flatpull_runtime_image_contents_total{outcome=\"reused\"}") > 0);
    }
  }

  @Test
  @Order(5)
  void streamHeldBack_prepareReturns_andTheContainerIsReadyThroughTheLazyLoaderMeanwhile() throws Exception {
    RuntimeImageArtifact a = artifactOf(python, tracePythonA);
    Digest blob = RuntimeImagePublisher.blobOf(client(python), a, manifest(python).digest()).digest();
    Predicate<LinkEmulator.Request> theStream = r -> r.byFlatpull() && r.path().endsWith("/blobs/" + blob);
    try (Node n = Node.fresh("service = \"" + a.serviceKey() + "\"", Optional.empty())) {
      link.hold(theStream);
      try {
        Start s = pythonStart(n, "py-held", PYTHON_A);
        assertTrue(link.seen(theStream), "the stream was asked for (and held): " + s.describe());
        System.out.print("python, stream held back: " + s.describe());
        assertTrue(s.delta("flatpull_content_served_bytes_total{source=\"lazy\"}") > 0, s.describe());
        assertEquals(0.0, s.delta("flatpull_runtime_image_contents_total{outcome=\"delivered\"}"),
            "ready while the stream was still held");
        assertTrue(s.readyMillis() < 15_000, "not slowed down by waiting for the held stream: " + s.describe());
      } finally {
        link.releaseHeld();
      }
      assertWholeTreeMatches(n, DebianImage.pythonRootfs());
    }
  }

  /** One bad runtime image per case: the container still starts, serves no wrong byte, and the counters say why. */
  @Test
  @Order(6)
  void badRuntimeImages_eachColdStartSucceedsThroughTheLazyLoader_noWrongByte_andCountersSayWhy() throws Exception {
    RuntimeImageArtifact a = artifactOf(python, tracePythonA);
    byte[] good = blobOf(python, a);
    RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(good);
    ImageManifest image = manifest(python);
    Descriptor subject = new Descriptor(MediaTypes.OCI_MANIFEST, image.digest(), image.raw().length, Map.of());

    byte[] flipped = good.clone();
    flipped[(int) (layout.frameStart(0) + layout.index().frames().get(0).length() / 2)] ^= 0x5a;
    badStart("flipped byte in a frame", layout.index(), flipped, subject,
        "flatpull_runtime_image_rejected_total{reason=\"bad_frame\"}",
        "flatpull_runtime_image_rejected_total{reason=\"bad_extent\"}");

    RuntimeImageIndex shifted = shiftFirstExtent(layout.index());
    badStart("wrong page index", shifted, rewrite(good, layout, shifted), subject,
        "flatpull_runtime_image_lookups_total{result=\"mismatch\"}");

    byte[] truncated = Arrays.copyOf(good, (int) layout.frameStart(Math.min(2, layout.index().frames().size() - 1)));
    badStart("truncated blob", layout.index(), truncated, subject,
        "flatpull_runtime_image_rejected_total{reason=\"stream_failed\"}",
        "flatpull_runtime_image_limits_total{limit=\"blob_size\"}");

    // Limits the image sets: each refused before a frame is read, and the start is lazy.
    Hostile valid = new Hostile(layout.index(), good);
    Hostile bomb = HostileRuntimeImages.zstdBomb(valid, 64 << 20);
    badStart("zstd-bomb index (" + bomb.blob().length + " bytes announcing 64 MiB)", bomb.index(), bomb.blob(),
        subject, "flatpull_runtime_image_limits_total{limit=\"index_size\"}");

    Hostile padded = HostileRuntimeImages.withUnusedFiles(valid, 200_000);
    badStart("index larger than the image's TOCs can need", padded.index(), padded.blob(), subject,
        "flatpull_runtime_image_limits_total{limit=\"index_size\"}");

    Hostile longer = HostileRuntimeImages.longer(valid, 4 << 20);
    badStart("blob longer than its index promises", longer.index(), longer.blob(), subject,
        "flatpull_runtime_image_limits_total{limit=\"blob_size\"}");

    Hostile bigFrame = HostileRuntimeImages.withFrameLargerThanItsExtents(valid, 1 << 20);
    badStart("a frame larger than its extents", bigFrame.index(), bigFrame.blob(), subject,
        "flatpull_runtime_image_limits_total{limit=\"frame_size\"}");

    badStartOn("max_share = 0.001", "runtime image of more than a working set", layout.index(), good, subject,
        "flatpull_runtime_image_limits_total{limit=\"working_set\"}");

    // A frame no extent names, after frame 0: counted, never fetched; the rest of the runtime image serves the start.
    int noise = 16 << 20;
    Hostile noisy = HostileRuntimeImages.withFrameWithoutExtents(valid, noise);
    RuntimeImageFormat.Layout noisyLayout = RuntimeImageFormat.read(noisy.blob());
    Start s = badStart("a frame without extents", noisy.index(), noisy.blob(), subject,
        "flatpull_runtime_image_limits_total{limit=\"frame_without_extent\"}");
    assertEquals(1.0, s.delta("flatpull_runtime_image_lookups_total{result=\"loaded\"}"), s.describe());
    long noiseEnd = noisyLayout.frameStart(2);
    String blobPath = "/blobs/" + Digest.sha256(noisy.blob());
    assertTrue(s.requests().stream().anyMatch(r -> r.path().endsWith(blobPath)
        && r.range().equals("bytes=" + noiseEnd + "-" + (noisy.blob().length - 1))), "frames after the noise by"
        + " range: " + s.describe());
    assertTrue(s.bytesDown() < good.length + noise / 2 + tocBytes(s), "the noise frame did not come down: "
        + s.describe());

    // A registry that fails mid-stream: the good runtime image again, its blob's connection cut after 100 KB.
    publisher(python).push(layout.index(), good, subject);
    Digest blob = Digest.sha256(good);
    link.cut(r -> r.byFlatpull() && r.path().endsWith("/blobs/" + blob), 100_000);
    try {
      badStart("registry failing mid-stream", layout.index(), null, subject,
          "flatpull_runtime_image_rejected_total{reason=\"stream_failed\"}");
    } finally {
      link.stopCutting();
    }

    // A runtime image of another manifest, listed under this image (a stale or forged listing).
    ImageManifest other = manifest(http);
    RuntimeImageArtifact httpArtifact = artifactOf(http, traceHttp);
    Referrers referrers = new Referrers(client(python), Sleeper.SYSTEM, InstantSource.system(), new Random(3));
    byte[] artifactManifest = client(http).fetchManifest(httpArtifact.digest().toString()).raw();
    for (Descriptor layer : ((ImageManifest) OciDocuments.parse(artifactManifest, MediaTypes.OCI_MANIFEST)).layers()) {
      Path f = dir.resolve("stale.blob");
      Files.deleteIfExists(f);
      client(http).downloadBlob(layer, f);
      client(python).pushBlob(layer, f);
    }
    client(python).pushManifest(httpArtifact.digest().toString(), MediaTypes.OCI_MANIFEST, artifactManifest);
    Map<String, String> newer = new java.util.HashMap<>(httpArtifact.manifest().annotations());
    newer.put(RuntimeImageArtifact.CREATED, "2099-01-01T00:00:00Z");
    newer.put(RuntimeImageArtifact.SERVICE_KEY, tracePythonA.service().key());
    Descriptor stale = new Descriptor(httpArtifact.manifest().mediaType(), httpArtifact.digest(),
        httpArtifact.manifest().size(), newer, Optional.empty(), httpArtifact.manifest().artifactType());
    referrers.update(image.digest(), current -> {
      List<Descriptor> next = new ArrayList<>(current.stream().filter(d -> !d.digest().equals(stale.digest())).toList());
      next.add(stale);
      return next;
    });
    assertTrue(other.digest() != null);
    badStart("runtime image of another manifest", RuntimeImageFormat.read(blobOf(http, httpArtifact)).index(), null,
        subject, "flatpull_runtime_image_lookups_total{result=\"mismatch\"}");
  }

  /** The opt-in page mode: pages checked against the runtime image's own digests, served on the same read path. */
  @Test
  @Order(7)
  void pageMode_onANodeThatTrustsIt_startsFromPages_sixRequests_hitRatioAbove95() throws Exception {
    Cli.Run build = Cli.inProcess("runtime-image", "build", "--plain-http", python, "--trace",
        dir.resolve("a.fptrace").toString(), "--push", "--verify", "runtime-image");
    assertEquals(0, build.exitCode(), build.stderr());
    try (Node n = Node.fresh("verify = \"runtime-image\"\nservice = \"" + tracePythonA.service().key() + "\"",
        Optional.empty(), false)) {
      Start s = pythonStart(n, "py-pages", PYTHON_A);
      System.out.print("python, page-mode runtime image: " + s.describe());
      assertEquals(1.0, s.delta("flatpull_runtime_image_lookups_total{result=\"loaded\"}"), n.flatpull().log());
      assertTrue(s.requests().size() <= 6, "at most 6 requests: " + s.describe());
      assertLookupOrder(s, manifest(python));
      assertTrue(s.hitRatio() >= 0.95, "page-mode hit ratio " + s.hitRatio() + ": " + s.describe());
      assertServedFilesMatch(n, tracePythonA, DebianImage.pythonRootfs());
    }
    // A node that verifies against the image does not load it.
    try (Node n = Node.fresh("service = \"" + tracePythonA.service().key() + "\"", Optional.empty(), false)) {
      Start s = pythonStart(n, "py-pages-refused", PYTHON_A);
      assertEquals(0.0, s.delta("flatpull_runtime_image_lookups_total{result=\"loaded\"}"), s.describe());
      assertWholeTreeMatches(n, DebianImage.pythonRootfs());
    }
  }

  /**
   * Pushes {@code blob} (when given) as the service's runtime image, cold-starts, and checks the fallback: the counters
   * say why, and every file an extent of {@code index} (the runtime image the node finds) names is the image's.
   */
  private static Start badStart(String what, RuntimeImageIndex index, byte[] blob, Descriptor subject,
      String... reasons) throws Exception {
    return badStartOn("", what, index, blob, subject, reasons);
  }

  /** {@link #badStart} on a node whose {@code [runtime_image]} table also holds {@code toml}. */
  private static Start badStartOn(String toml, String what, RuntimeImageIndex index, byte[] blob, Descriptor subject,
      String... reasons) throws Exception {
    if (blob != null) {
      publisher(python).push(index, blob, subject);
    }
    // The node loads service A's runtime image, whichever is newer.
    try (Node n = Node.fresh("service = \"" + tracePythonA.service().key() + "\"\n" + toml, Optional.empty(),
        false)) {
      Start s = pythonStart(n, "py-bad", PYTHON_A);
      double why = 0;
      for (String r : reasons) {
        why += s.delta(r);
      }
      System.out.print(what + ": " + s.describe());
      assertTrue(why > 0, what + ": none of " + List.of(reasons) + " counted:\n" + n.metrics() + "\n"
          + n.flatpull().log());
      assertFilesOfExtentsMatch(n, index, DebianImage.pythonRootfs());
      return s;
    }
  }

  private static RuntimeImageIndex shiftFirstExtent(RuntimeImageIndex index) {
    List<RuntimeImageIndex.LayerExtents> layers = new ArrayList<>(index.layers());
    RuntimeImageIndex.LayerExtents l = layers.get(0);
    List<RuntimeImageIndex.Extent> extents = new ArrayList<>(l.extents());
    RuntimeImageIndex.Extent e = extents.get(0);
    extents.set(0, new RuntimeImageIndex.Extent(e.file(), e.fileOffset() + 4096, e.length(), e.frame(),
        e.frameOffset(), e.digest()));
    layers.set(0, new RuntimeImageIndex.LayerExtents(l.digest(), l.files(), extents));
    return new RuntimeImageIndex(index.verify(), index.service(), index.flatpullVersion(), index.createdAt(),
        index.trace(), index.frames(), layers);
  }

  private static byte[] rewrite(byte[] blob, RuntimeImageFormat.Layout layout, RuntimeImageIndex index) {
    return RuntimeImageFormat.write(index, layout.frames(blob));
  }

  private static double sum(Start s, String name) {
    double total = 0;
    Set<String> keys = new HashSet<>(s.atReady().keySet());
    for (String k : keys) {
      if (k.equals(name) || k.startsWith(name + "{")) {
        total += s.delta(k);
      }
    }
    return total;
  }

}
