package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.it.FaultProxy.Fault;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Cold starts of the python image through a registry that misbehaves ({@link FaultProxy}), with real containerd, FUSE
 * and flatpull's default configuration (its retries and timeouts too, but a 2 s read timeout so that a stalled
 * response costs 2 s, not 30): at 10 % faults of every kind on flatpull's requests, every start gets ready and every
 * file it reads has the image's bytes; at 100 % flipped bytes, reads fail (EIO, logged, counted), never wrong, and
 * succeed once the faults stop; a registry away for 5 s delays a start, not fails it. Seeded
 * ({@code -Dflatpull.faults.seed}); prints its counts.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class FaultMatrixIT {
  private static final long SEED = Long.getLong("flatpull.faults.seed", 20261201L);
  private static final int STARTS = Integer.getInteger("flatpull.faults.starts", 20);
  private static final Cleanup cleanup = new Cleanup();
  private static FaultProxy proxy;
  private static FlatpullDaemon flatpull;
  private static ContainerdServer containerd;
  private static MetricsEndpoint managerMetrics;
  private static String image;
  private static Path rootfs;
  private static List<String> pythonFiles;
  private static int containers;

  @BeforeAll
  static void start() throws Exception {
    Processes.require("runc");
    RegistryServer registry = cleanup.add(RegistryServer.start());
    String direct = DebianImage.pushPythonEstargz(registry.address(), "it/python");
    rootfs = DebianImage.pythonRootfs();
    proxy = cleanup.add(FaultProxy.start(registry.address(), SEED, Duration.ofSeconds(5)));
    image = proxy.address() + direct.substring(registry.address().length());
    int port = Processes.freePort();
    managerMetrics = new MetricsEndpoint(port);
    flatpull = cleanup.add(FlatpullDaemon.start("fuse_manager_metrics_address = \"127.0.0.1:" + port + "\"", true, "",
        "read_timeout = \"2s\"\nconnect_timeout = \"2s\""));
    containerd = cleanup.add(ContainerdServer.withFlatpull(flatpull.socket()));
    try (Stream<Path> files = Files.walk(rootfs.resolve("usr/lib/python3.11"))) {
      pythonFiles = files.filter(p -> Files.isRegularFile(p, java.nio.file.LinkOption.NOFOLLOW_LINKS))
          .map(p -> "/" + rootfs.relativize(p)).sorted().toList();
    }
  }

  @AfterAll
  static void stop() throws Exception {
    cleanup.close();
  }

  private static FaultProxy.Plan onFlatpull(double rate, EnumSet<Fault> faults) {
    return new FaultProxy.Plan(rate, faults, LinkEmulator.Request::byFlatpull);
  }

  /** The image gone from the node: its snapshots (so flatpull's mounts), the page cache, the kernel's copies. */
  private static void forget() throws Exception {
    containerd.ctr("image", "rm", "--sync", image);
    Cli.Run r = Cli.inProcess("cache", "empty", "--config", flatpull.config().toString());
    assertEquals(0, r.exitCode(), r.stderr());
    Processes.dropCaches();
  }

  private static String sha256(Path p) throws Exception {
    return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(p)));
  }

  /**
   * Starts python in a container of the image, imports a few modules (readiness), and prints the SHA-256 of
   * {@code files}; returns them by path.
   */
  private static Processes.Result runHashing(List<String> files) throws Exception {
    List<String> cmd = new ArrayList<>(List.of("run", "--rm", "--snapshotter", "flatpull", image,
        "fault-" + (++containers), "/usr/bin/python3", "-c",
        "import hashlib, sys, json, http.server, email.parser, decimal, logging\n"
            + "for p in sys.argv[1:]:\n"
            + "    print(hashlib.sha256(open(p, 'rb').read()).hexdigest(), p)\n"
            + "print(json.dumps({'ok': 40 + 2}))"));
    cmd.addAll(files);
    return containerd.ctr(cmd.toArray(String[]::new));
  }

  private static Map<String, String> hashes(String stdout) {
    Map<String, String> m = new LinkedHashMap<>();
    stdout.lines().filter(l -> l.length() > 66 && l.charAt(64) == ' ').forEach(l -> m.put(l.substring(65), l.substring(0, 64)));
    return m;
  }

  /**
   * The container's own output comes first in a failure's message, flatpull's log last: a runner that cuts long
   * messages short keeps what failed.
   */
  private static void assertSameAsTheImage(List<String> files, Processes.Result r, String what, String log)
      throws Exception {
    String failed = what + ": exit " + r.exitCode() + "\nstderr: " + r.stderr() + "\nstdout: " + r.stdout() + "\n" + log;
    assertEquals(0, r.exitCode(), failed);
    assertTrue(r.stdout().trim().endsWith("{\"ok\": 42}"), failed);
    Map<String, String> got = hashes(r.stdout());
    for (String f : files) {
      assertEquals(sha256(rootfs.resolve(f.substring(1))), got.get(f), what + ": " + f + "\n" + log);
    }
  }

  @Test
  @Order(1)
  void coldStarts_atTenPercentFaultsOfEveryKind_allGetReady_withTheImagesBytes() throws Exception {
    Random pick = new Random(SEED);
    long started = System.nanoTime();
    for (int i = 1; i <= STARTS; i++) {
      forget();
      proxy.setPlan(onFlatpull(0.10, EnumSet.allOf(Fault.class)));
      containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
      List<String> sample = new ArrayList<>();
      for (int k = 0; k < 40; k++) {
        sample.add(pythonFiles.get(pick.nextInt(pythonFiles.size())));
      }
      List<String> files = sample.stream().distinct().toList();
      Processes.Result r = runHashing(files);
      proxy.setPlan(FaultProxy.Plan.NONE);
      assertSameAsTheImage(files, r, "cold start " + i + " (" + proxy.describe() + ")", flatpull.log());
    }
    System.out.printf("fault matrix: %d cold starts ready in %.0f s, every file read matched; %s%n", STARTS,
        (System.nanoTime() - started) / 1e9, proxy.describe());
    for (Fault f : Fault.values()) {
      assertTrue(proxy.injected().get(f) > 0, f + " was never injected: " + proxy.describe());
    }
  }

  @Test
  @Order(2)
  void flippedBytesOnEveryRead_failWithEio_areCountedAndLogged_neverServed_andLaterReadsSucceed() throws Exception {
    forget();
    containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
    // Let background fetching go quiet, then empty what it brought: the next reads must go to the registry.
    long seen = -1;
    while (proxy.requests() != seen) {
      seen = proxy.requests();
      Thread.sleep(4000);
    }
    Cli.Run empty = Cli.inProcess("cache", "empty", "--config", flatpull.config().toString());
    assertEquals(0, empty.exitCode(), empty.stderr());
    Processes.dropCaches();
    double errorsBefore = MetricsEndpoint.sum(managerMetrics.samples(), "flatpull_fuse_errors_total");
    String file = "/usr/lib/python3.11/decimal.py";
    String victim = pythonFiles.stream().filter(f -> f.endsWith("/_pydecimal.py")).findFirst().orElseThrow();
    proxy.setPlan(new FaultProxy.Plan(1.0, EnumSet.of(Fault.FLIP),
        r -> r.byFlatpull() && r.path().contains("/blobs/") && !r.range().isEmpty()));
    Processes.Result bad = containerd.ctr("run", "--rm", "--snapshotter", "flatpull", image, "fault-" + (++containers),
        "/usr/bin/sha256sum", victim);
    proxy.setPlan(FaultProxy.Plan.NONE);
    assertNotEquals(0, bad.exitCode(), "read through flipped bytes succeeded: " + bad.stdout());
    // sha256sum's own error, or containerd's when the read that failed was its own (users and groups at start), or
    // SIGBUS (exit 135) when it was a page of a mapped library (the dynamic loader's, read before sha256sum runs).
    assertTrue((bad.stderr() + bad.stdout()).toLowerCase(java.util.Locale.ROOT).contains("input/output error")
        || bad.exitCode() == 128 + 7, "exit " + bad.exitCode() + ": " + bad.stderr() + bad.stdout());
    assertFalse(bad.stdout().contains(" " + victim), "a hash was printed: " + bad.stdout());
    Map<String, Double> after = managerMetrics.samples();
    double errors = MetricsEndpoint.sum(after, "flatpull_fuse_errors_total") - errorsBefore;
    assertTrue(errors > 0, "no FUSE error counted: " + after);
    assertTrue(flatpull.log().contains(" failed: "), "no log line of the failed read");
    System.out.printf("flipped bytes: exit %d, %.0f FUSE reads failed (%s), %s%n", bad.exitCode(), errors, after.entrySet().stream()
        .filter(e -> e.getKey().startsWith("flatpull_fuse_errors_total")).toList(), proxy.describe());

    Processes.Result good = containerd.ctr("run", "--rm", "--snapshotter", "flatpull", image,
        "fault-" + (++containers), "/usr/bin/sha256sum", victim, file);
    assertEquals(0, good.exitCode(), good.stderr());
    assertEquals(Map.of(victim, sha256(rootfs.resolve(victim.substring(1))), file,
        sha256(rootfs.resolve(file.substring(1)))), Map.copyOf(sha256sumLines(good.stdout())));
  }

  private static Map<String, String> sha256sumLines(String stdout) {
    Map<String, String> m = new LinkedHashMap<>();
    stdout.lines().filter(l -> l.length() > 66).forEach(l -> m.put(l.substring(66), l.substring(0, 64)));
    return m;
  }

  @Test
  @Order(3)
  void aRegistryAwayForFiveSeconds_delaysAColdStart_butDoesNotFailIt() throws Exception {
    forget();
    containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
    List<String> files = pythonFiles.subList(0, 30);
    proxy.down();
    long t0 = System.nanoTime();
    Thread up = new Thread(() -> {
      try {
        Thread.sleep(5000);
        proxy.up();
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    });
    up.start();
    Processes.Result r = runHashing(files);
    double took = (System.nanoTime() - t0) / 1e9;
    up.join();
    assertSameAsTheImage(files, r, "the start while the registry was away", flatpull.log());
    System.out.printf("registry away for 5 s: the cold start got ready after %.1f s%n", took);
    assertTrue(took >= 5, "ready before the registry was back: the start did not need it");
  }

  /**
   * The runtime image's stream joins the matrix: recorded and published with the registry well, then cold starts at
   * 10 % faults on every request, the stream's included. Each start gets ready with the image's bytes, whether the
   * stream brought the working set or fell back to the lazy loader part-way.
   */
  @Test
  @Order(5)
  void coldStartsWithARuntimeImage_atTenPercentFaults_getReady_withTheImagesBytes() throws Exception {
    forget();
    proxy.setPlan(FaultProxy.Plan.NONE);
    Path trace = Files.createTempFile("fault-matrix", ".fptrace");
    List<String> files = pythonFiles.subList(pythonFiles.size() - 30, pythonFiles.size());
    List<String> record = new ArrayList<>(List.of("record", "--config", flatpull.config().toString(), "--plain-http",
        "--containerd-address", containerd.socket().toString(), "--namespace", ContainerdServer.NAMESPACE,
        "--out", trace.toString(), "--probe-timeout", "90s", "--push-runtime-image", "--probe", "exit", image, "--",
        "/usr/bin/python3", "-c", "import hashlib, sys, json, http.server, email.parser, decimal, logging\n"
            + "for p in sys.argv[1:]:\n    hashlib.sha256(open(p, 'rb').read()).hexdigest()\n"));
    record.addAll(files);
    Cli.Run r = Cli.inProcess(record.toArray(String[]::new));
    assertEquals(0, r.exitCode(), r.stderr());
    int starts = 3;
    double loadedBefore = sample("flatpull_runtime_image_lookups_total{result=\"loaded\"}");
    for (int i = 1; i <= starts; i++) {
      forget();
      proxy.setPlan(onFlatpull(0.10, EnumSet.allOf(Fault.class)));
      containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
      Processes.Result run = runHashing(files);
      proxy.setPlan(FaultProxy.Plan.NONE);
      assertSameAsTheImage(files, run, "runtime-image start " + i + " (" + proxy.describe() + ")", flatpull.log());
    }
    double loaded = sample("flatpull_runtime_image_lookups_total{result=\"loaded\"}") - loadedBefore;
    System.out.printf("runtime image at 10%% faults: %d starts ready with the image's bytes, the runtime image loaded"
        + " in %.0f of them (the lazy loader served the rest); %s%n", starts, loaded, proxy.describe());
    Files.deleteIfExists(trace);
  }

  private static double sample(String key) throws Exception {
    return managerMetrics.samples().getOrDefault(key, 0.0);
  }

  @Test
  @Order(4)
  void theWholeTree_readAtTenPercentFaults_isTheImage() throws Exception {
    forget();
    proxy.setPlan(onFlatpull(0.10, EnumSet.allOf(Fault.class)));
    containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
    Processes.Result r = containerd.ctr("run", "--rm", "--snapshotter", "flatpull", image, "fault-" + (++containers),
        "/bin/sh", "-c", "find /usr /etc /var -xdev -type f -print0 | xargs -0 sha256sum");
    proxy.setPlan(FaultProxy.Plan.NONE);
    assertEquals(0, r.exitCode(), r.stderr());
    Map<String, String> got = sha256sumLines(r.stdout());
    int compared = 0;
    try (Stream<Path> all = Stream.of("usr", "etc", "var").map(rootfs::resolve).flatMap(d -> {
      try {
        return Files.walk(d);
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    })) {
      for (Path p : (Iterable<Path>) all.filter(x -> Files.isRegularFile(x, java.nio.file.LinkOption.NOFOLLOW_LINKS))::iterator) {
        String inContainer = "/" + rootfs.relativize(p);
        assertEquals(sha256(p), got.get(inContainer), inContainer);
        compared++;
      }
    }
    System.out.printf("whole tree at 10%% faults: %d files equal to the image; %s%n", compared, proxy.describe());
    assertTrue(compared > 1000, "compared only " + compared + " files");
  }
}
