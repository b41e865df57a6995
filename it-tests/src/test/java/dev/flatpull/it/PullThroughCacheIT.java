package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Await;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import dev.flatpull.trace.TraceFile;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * flatpull behind a real pull-through cache: Debian's distribution registry in proxy mode, in front of the origin,
 * as the origin's {@code hosts.toml} mirror. Until the cache holds a blob it answers range reads with the whole blob;
 * flatpull must not drain it. Both the cache and the origin are reached through emulated 2 ms / 100 Mbit links, which
 * count the bytes on the wire. The tests run in order: the first is the cold read of an uncached layer.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class PullThroughCacheIT {
  private static final long ONE_MB = 1_000_000;
  // Slow enough that what is in flight when a response is given up stays far below the bound under load.
  private static final LinkEmulator.Link LAN = LinkEmulator.Link.parse("2ms/100mbit");
  private static final Pattern RECEIVED = Pattern.compile("received: (\\d+) bytes");
  private static final Cleanup cleanup = new Cleanup();
  private static RegistryServer origin;
  private static RegistryServer cache;
  private static LinkEmulator toCache;
  private static LinkEmulator toOrigin;
  private static TestImage image;
  private static String esgz;
  private static Path dir;
  private static Path config;

  @BeforeAll
  static void start() throws Exception {
    origin = cleanup.add(RegistryServer.start());
    image = TestImage.push(origin, "it/pull-through", "plain");
    esgz = origin.address() + "/it/pull-through:esgz";
    Cli.Run converted = Cli.inProcess("convert", "--plain-http", "--chunk-size", "262144", image.reference.toString(),
        esgz);
    assertEquals(0, converted.exitCode(), converted.stderr());
    cache = cleanup.add(RegistryServer.startPullThrough("http://" + origin.address()));
    toCache = cleanup.add(LinkEmulator.start(cache.address(), LAN));
    toOrigin = cleanup.add(LinkEmulator.start(origin.address(), LAN));
    dir = Files.createTempDirectory("flatpull-pull-through-it");
    config = configWithMirror("hosts", "http://" + toOrigin.address());
  }

  @AfterAll
  static void stop() throws Exception {
    cleanup.close();
    if (dir != null) {
      Processes.deleteTree(dir);
    }
  }

  /** A flatpull configuration whose hosts.toml for the origin's name lists the cache, then {@code server}. */
  private static Path configWithMirror(String name, String server) throws Exception {
    Path hosts = Files.createDirectories(dir.resolve(name).resolve(origin.address()));
    Files.writeString(hosts.resolve("hosts.toml"), """
        server = "%s"

        [host."http://%s"]
          capabilities = ["pull", "resolve"]
        """.formatted(server, toCache.address()));
    Path file = dir.resolve(name + ".toml");
    Files.writeString(file, """
        root = "%s"

        [registry]
        config_path = "%s"
        max_attempts = 2
        initial_backoff = "10ms"
        max_backoff = "50ms"
        """.formatted(dir.resolve(name + "-root"), dir.resolve(name)));
    return file;
  }

  private static Cli.Run cat(Path withConfig, String path) {
    return Cli.inProcess("cat", "--config", withConfig.toString(), "--stats", esgz, "/" + path);
  }

  private static long received(Cli.Run r) {
    Matcher m = RECEIVED.matcher(r.stderr());
    assertTrue(m.find(), r.stderr());
    return Long.parseLong(m.group(1));
  }

  @Test
  @Order(1)
  void coldRead_smallFileOfAnUncachedLayer_receivesLessThanOneMegabyte() throws Exception {
    assertTrue(image.lowerLayerSize > 4 * ONE_MB, "the layer is many megabytes: " + image.lowerLayerSize);
    toCache.mark();
    toOrigin.mark();
    Cli.Run r = cat(config, image.smallFile);
    assertEquals(0, r.exitCode(), r.stderr());
    assertArrayEquals(image.files.get(image.smallFile), r.stdout());
    LinkEmulator.Counts viaCache = toCache.sinceMark();
    LinkEmulator.Counts direct = toOrigin.sinceMark();
    long wire = viaCache.bytesDown() + direct.bytesDown();
    System.out.printf("cold read through the pull-through cache: flatpull received %d bytes; on the wire %d from the"
        + " cache (%d requests), %d from the origin (%d requests); layer %d bytes%n", received(r),
        viaCache.bytesDown(), viaCache.requests().size(), direct.bytesDown(), direct.requests().size(),
        image.lowerLayerSize);
    assertTrue(r.stderr().contains("given up for the next endpoint"), "the cache sent a whole blob: " + r.stderr());
    assertTrue(received(r) < ONE_MB, r.stderr());
    assertTrue(wire < ONE_MB, "on the wire: " + wire + " bytes, " + LinkEmulator.describe(viaCache) + "; "
        + LinkEmulator.describe(direct));
    assertTrue(direct.requests().stream().anyMatch(q -> q.kind().equals("blob-range")),
        "the ranges the cache ignored went to the origin");
  }

  @Test
  @Order(2)
  void onceTheCacheHoldsTheLayer_itsRangesAreServedByTheCache() throws Exception {
    Descriptor lower = manifest().layers().get(0);
    awaitRangesHonoured(lower);
    toCache.mark();
    toOrigin.mark();
    String other = libraries().get(0);
    Cli.Run r = cat(config, other);
    assertEquals(0, r.exitCode(), r.stderr());
    assertArrayEquals(image.files.get(other), r.stdout());
    assertTrue(toCache.sinceMark().requests().stream().anyMatch(q -> q.kind().equals("blob-range")),
        LinkEmulator.describe(toCache.sinceMark()));
    assertEquals(List.of(), toOrigin.sinceMark().requests(), "nothing left for the origin");
  }

  @Test
  @Order(3)
  void everyFile_throughTheCache_equalsTheImage() throws Exception {
    assertTrue(image.files.size() > 40, "a real image has many files: " + image.files.size());
    for (Map.Entry<String, byte[]> f : image.files.entrySet()) {
      Cli.Run r = Cli.inProcess("cat", "--config", config.toString(), esgz, "/" + f.getKey());
      assertEquals(0, r.exitCode(), f.getKey() + ": " + r.stderr());
      assertArrayEquals(f.getValue(), r.stdout(), f.getKey());
    }
  }

  @Test
  @Order(4)
  void runtimeImage_pushedToTheOrigin_isFoundVerifiedAndReadThroughTheCacheWithTheOriginAway() throws Exception {
    ImageManifest manifest = manifest();
    Descriptor lower = manifest.layers().get(0);
    List<String> files = libraries().stream().skip(1).limit(3).map(f -> "/" + f).toList();
    List<PageRun> runs = List.of(new PageRun(0, 0, 4, 10, 1), new PageRun(1, 0, 2, 20, 1), new PageRun(2, 1, 3, 30, 1));
    Trace trace = new Trace(new ServiceVersion(esgz, manifest.digest().toString(), "linux/amd64", List.of("app"),
        List.of(), "", List.of("exit")), "it", Instant.parse("2026-12-01T00:00:00Z"), List.of(500L),
        List.of(new LayerTrace(lower.digest().toString(), files, runs)));
    Path traceFile = dir.resolve("service.fptrace");
    TraceFile.write(trace, traceFile);
    Cli.Run pushed = Cli.inProcess("runtime-image", "build", "--plain-http", "--push", esgz, "--trace",
        traceFile.toString());
    assertEquals(0, pushed.exitCode(), pushed.stderr());

    Path originAway = configWithMirror("origin-away", "http://127.0.0.1:" + Processes.freePort());
    toCache.mark();
    Cli.Run shown = Cli.inProcess("runtime-image", "show", "--config", originAway.toString(), "--verify", esgz);
    assertEquals(0, shown.exitCode(), shown.stdout() + shown.stderr());
    List<String> kinds = toCache.sinceMark().requests().stream().map(LinkEmulator.Request::kind).toList();
    System.out.println("runtime image through the cache, origin away: " + kinds + "\n" + shown.out());
    assertTrue(shown.out().contains(trace.service().key()), shown.out());
    assertTrue(kinds.contains("referrers") && kinds.contains("manifest")
        && (kinds.contains("blob") || kinds.contains("blob-range")),
        "the referrers index, the artifact and its blob came through the cache: " + kinds);
    Cli.Run r = Cli.inProcess("cat", "--config", originAway.toString(), esgz, files.get(0));
    assertEquals(0, r.exitCode(), r.stderr());
    assertArrayEquals(image.files.get(files.get(0).substring(1)), r.stdout());
  }

  /** Regular files of the lower layer larger than 32 KiB. */
  private static List<String> libraries() {
    List<String> found = image.files.entrySet().stream()
        .filter(e -> e.getKey().startsWith("usr/lib/jvm/lib/lib") && !e.getKey().contains("-link")
            && !e.getKey().contains("-hard") && e.getValue().length > 32 * 1024)
        .map(Map.Entry::getKey).toList();
    assertTrue(found.size() >= 4, "libraries: " + found);
    return found;
  }

  private static ImageManifest manifest() throws Exception {
    FlatpullConfig plain = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    try (RegistryClients clients = RegistryClients.create(plain, FetchListener.NONE)) {
      ImageReference ref = ImageReference.parse(esgz);
      return clients.client(ref).resolve(ref, Platform.current()).manifest();
    }
  }

  /** The cache fills its copy of a blob in the background after the first request for it; this waits for that. */
  private static void awaitRangesHonoured(Descriptor blob) throws Exception {
    URI uri = URI.create("http://" + cache.address() + "/v2/it/pull-through/blobs/" + blob.digest());
    Await.until(Duration.ofSeconds(60), () -> {
      HttpURLConnection c = (HttpURLConnection) uri.toURL().openConnection();
      c.setRequestProperty("Range", "bytes=0-0");
      try {
        return c.getResponseCode() == 206;
      } finally {
        c.disconnect();
      }
    }, () -> "the cache stores " + blob.digest());
  }
}
