package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.github.luben.zstd.Zstd;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.Trace;
import dev.flatpull.trace.TraceFile;
import java.io.IOException;
import java.io.InputStream;
import java.io.RandomAccessFile;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Runtime images with a real registry (distribution 2.8: no referrers API, so the tag schema), containerd, runc and
 * FUSE: recorded and pushed in one command, listed, shown, checked byte for byte against the root file system the
 * image was built from (read independently of flatpull), sized against the compressed image, pushed concurrently,
 * replaced, removed and pruned; bad input through the CLI. The push by {@code record} is checked first, before the
 * other tests change what the registry lists.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class RuntimeImageIT {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Pattern PERCENT = Pattern.compile("([0-9.]+) % of the");
  private static final Cleanup cleanup = new Cleanup();
  private static RegistryServer registry;
  private static FlatpullDaemon flatpull;
  private static ContainerdServer containerd;
  private static String image;
  private static Path dir;
  private static Path traceA;
  private static Path traceB;
  private static Cli.Run recordA;

  @BeforeAll
  static void start() throws Exception {
    Processes.require("runc");
    registry = cleanup.add(RegistryServer.start());
    image = DebianImage.pushPythonEstargz(registry.address(), "it/python");
    flatpull = cleanup.add(FlatpullDaemon.start(""));
    containerd = cleanup.add(ContainerdServer.withFlatpull(flatpull.socket()));
    dir = Files.createTempDirectory("flatpull-runtime-image-it");
    traceA = dir.resolve("a.fptrace");
    traceB = dir.resolve("b.fptrace");
    recordA = record(traceA, true, "import json, http.server, email.parser, urllib.request, decimal, logging");
    assertEquals(0, recordA.exitCode(), recordA.stderr());
    Cli.Run b = record(traceB, false, "import json");
    assertEquals(0, b.exitCode(), b.stderr());
  }

  @AfterAll
  static void stop() throws Exception {
    cleanup.close();
    if (dir != null) {
      Processes.deleteTree(dir);
    }
  }

  private static Cli.Run record(Path out, boolean push, String python) {
    return record(image, out, push, python);
  }

  private static Cli.Run record(String image, Path out, boolean push, String python) {
    List<String> args = new ArrayList<>(List.of("record", "--config", flatpull.config().toString(), "--plain-http",
        "--containerd-address", containerd.socket().toString(), "--namespace", ContainerdServer.NAMESPACE,
        "--out", out.toString(), "--probe", "exit", "--probe-timeout", "60s"));
    if (push) {
      args.add("--push-runtime-image");
    }
    args.addAll(List.of(image, "--", "/usr/bin/python3", "-c", python));
    return Cli.inProcess(args.toArray(String[]::new));
  }

  private static Cli.Run cli(String... args) {
    List<String> all = new ArrayList<>(List.of(args));
    all.add(2, "--plain-http");
    all.add(3, "--config");
    all.add(4, flatpull.config().toString());
    return Cli.inProcess(all.toArray(String[]::new));
  }

  private static double percent(String stderr, String line) {
    Matcher m = PERCENT.matcher(stderr.lines().filter(l -> l.contains(line)).findFirst().orElseThrow(
        () -> new AssertionError("no line with '" + line + "' in: " + stderr)));
    assertTrue(m.find(), stderr);
    return Double.parseDouble(m.group(1));
  }

  @Test
  @Order(1)
  void recordPushRuntimeImage_thenLsAndShowMatchTheTrace_andEveryByteEqualsTheRootFileSystem() throws Exception {
    Trace trace = TraceFile.read(traceA);
    System.out.print(recordA.stderr().lines().filter(l -> l.contains("runtime image")).reduce("", (a, b) -> a + b
        + "\n"));
    assertTrue(recordA.stderr().contains("(referrers tag schema, sha256-"), recordA.stderr());
    double pct = percent(recordA.stderr(), "runtime image (image mode)");
    assertTrue(pct <= 8.0, "the runtime image is " + pct + " % of the compressed image");

    Cli.Run ls = cli("runtime-image", "ls", image);
    assertEquals(0, ls.exitCode(), ls.stderr());
    assertTrue(ls.out().contains("1 runtime image of") && ls.out().contains(trace.service().key().substring(0, 19)),
        ls.out());
    JsonNode listed = JSON.readTree(cli("runtime-image", "ls", "--json", image).stdout());
    assertEquals(1, listed.size());
    assertEquals(trace.pages(), listed.get(0).get("pages").asLong());
    assertEquals(trace.service().key(), listed.get(0).get("serviceKey").asText());

    Cli.Run show = cli("runtime-image", "show", "--json", image);
    assertEquals(0, show.exitCode(), show.stderr());
    JsonNode index = JSON.readTree(show.stdout());
    assertEquals(trace.service().key(), index.get("service").get("key").asText());
    assertEquals(trace.pages(), index.get("trace").get("pages").asLong());
    assertEquals("image", index.get("verify").asText());
    LayerTrace lt = trace.layers().get(0);
    JsonNode layer = index.get("layers").get(0);
    assertEquals(lt.layerDigest(), layer.get("digest").asText());
    List<String> files = new ArrayList<>();
    layer.get("files").forEach(f -> files.add(f.asText()));
    assertEquals(lt.files(), files, "the runtime image serves the files the trace read");

    Cli.Run verified = cli("runtime-image", "show", "--verify", image);
    assertEquals(0, verified.exitCode(), verified.stderr() + verified.out());
    assertTrue(verified.out().contains("; 0 rejected"), verified.out());

    // Independently of flatpull: the blob from the registry's tag-schema index, its frames decoded with zstd alone,
    // every extent compared with the file in the root file system the image was built from.
    byte[] blob = blobFromRegistry(index.get("service").get("manifestDigest").asText());
    Path rootfs = DebianImage.pythonRootfs();
    ByteBuffer header = ByteBuffer.wrap(blob, 0, 24).order(ByteOrder.LITTLE_ENDIAN);
    int indexLength = header.getInt(20);
    long dataStart = 24L + indexLength;
    JsonNode frames = index.get("frames");
    Set<String> covered = new HashSet<>();
    long compared = 0;
    for (JsonNode e : layer.get("extents")) {
      String path = files.get(e.get(0).asInt());
      long off = e.get(1).asLong();
      int len = e.get(2).asInt();
      JsonNode frame = frames.get(e.get(3).asInt());
      byte[] content = Zstd.decompress(Arrays.copyOfRange(blob, (int) (dataStart + frame.get(1).asLong()),
          (int) (dataStart + frame.get(1).asLong() + frame.get(2).asInt())), frame.get(3).asInt());
      byte[] got = Arrays.copyOfRange(content, e.get(4).asInt(), e.get(4).asInt() + len);
      assertArrayEquals(read(rootfs.resolve(path.substring(1)), off, len), got, path + " at " + off);
      for (long p = off / 4096; p * 4096 < off + len; p++) {
        covered.add(path + "#" + p);
      }
      compared += len;
    }
    for (PageRun r : lt.runs()) {
      for (long p = r.firstPage(); p < r.firstPage() + r.pages(); p++) {
        assertTrue(covered.contains(lt.files().get(r.file()) + "#" + p), lt.files().get(r.file()) + " page " + p);
      }
    }
    System.out.printf("runtime image: %d bytes compared with the root file system, every traced page covered%n",
        compared);
  }

  private static byte[] read(Path file, long offset, int length) throws IOException {
    try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "r")) {
      byte[] b = new byte[length];
      f.seek(offset);
      f.readFully(b);
      return b;
    }
  }

  private static byte[] blobFromRegistry(String manifestDigest) throws IOException {
    String base = "http://" + registry.address() + "/v2/it/python/";
    JsonNode tagIndex = JSON.readTree(get(base + "manifests/sha256-" + manifestDigest.substring(7),
        "application/vnd.oci.image.index.v1+json"));
    assertEquals(1, tagIndex.get("manifests").size(), tagIndex.toString());
    JsonNode entry = tagIndex.get("manifests").get(0);
    assertEquals("application/vnd.flatpull.runtime-image.v1", entry.get("artifactType").asText());
    JsonNode artifact = JSON.readTree(get(base + "manifests/" + entry.get("digest").asText(),
        "application/vnd.oci.image.manifest.v1+json"));
    assertEquals(manifestDigest, artifact.get("subject").get("digest").asText());
    return get(base + "blobs/" + artifact.get("layers").get(0).get("digest").asText(), "*/*");
  }

  private static byte[] get(String url, String accept) throws IOException {
    HttpURLConnection c = (HttpURLConnection) URI.create(url).toURL().openConnection();
    c.setRequestProperty("Accept", accept);
    try (InputStream in = c.getInputStream()) {
      return in.readAllBytes();
    }
  }

  @Test
  @Order(2)
  void buildCompare_printsTheDefaultModeWithinEightPercent_andThePageModeBesideIt() throws Exception {
    Path out = dir.resolve("a.fpri");
    Cli.Run r = cli("runtime-image", "build", image, "--trace", traceA.toString(), "--out", out.toString(),
        "--compare");
    assertEquals(0, r.exitCode(), r.stderr());
    System.out.print(r.stderr().lines().filter(l -> l.contains("%")).reduce("", (a, b) -> a + b + "\n"));
    double chunks = percent(r.stderr(), "runtime image (image mode)");
    double pages = percent(r.stderr(), "the runtime-image mode would be");
    assertTrue(chunks <= 8.0, chunks + " %");
    assertTrue(pages > 0 && pages <= chunks, "pages " + pages + " %, chunks " + chunks + " %");
    Cli.Run show = cli("runtime-image", "show", out.toString());
    assertEquals(0, show.exitCode(), show.stderr());
    assertTrue(show.out().contains("/usr/bin/python3.11"), show.out());
  }

  @Test
  @Order(5)
  void concurrentPushesOfTwoServiceVersions_bothSurvive_andPushingAgainReplaces_rmAndPruneRemove()
      throws Exception {
    assertEquals(0, cli("runtime-image", "rm", "--all", image).exitCode());
    assertTrue(cli("runtime-image", "ls", image).out().contains("0 runtime images"));
    // Two processes at once, as two CI jobs of one release would.
    CompletableFuture<Cli.Run> a = CompletableFuture.supplyAsync(() -> launcher("runtime-image", "build", "--push",
        image, "--trace", traceA.toString()));
    CompletableFuture<Cli.Run> b = CompletableFuture.supplyAsync(() -> launcher("runtime-image", "build", "--push",
        image, "--trace", traceB.toString()));
    assertEquals(0, a.get().exitCode(), a.get().stderr());
    assertEquals(0, b.get().exitCode(), b.get().stderr());
    JsonNode listed = JSON.readTree(cli("runtime-image", "ls", "--json", image).stdout());
    assertEquals(2, listed.size(), listed.toString());

    String keyA = TraceFile.read(traceA).service().key();
    Cli.Run again = cli("runtime-image", "build", "--push", image, "--trace", traceA.toString());
    assertEquals(0, again.exitCode(), again.stderr());
    assertTrue(again.stderr().contains("replaced 1 of the same service version"), again.stderr());
    assertEquals(2, JSON.readTree(cli("runtime-image", "ls", "--json", image).stdout()).size());

    Cli.Run rm = cli("runtime-image", "rm", "--service", keyA.substring(7, 19), image);
    assertEquals(0, rm.exitCode(), rm.stderr());
    JsonNode left = JSON.readTree(cli("runtime-image", "ls", "--json", image).stdout());
    assertEquals(1, left.size());
    assertEquals(TraceFile.read(traceB).service().key(), left.get(0).get("serviceKey").asText());

    assertTrue(cli("runtime-image", "prune", "--older-than", "1h", image).stderr().contains("0 runtime images removed"));
    assertTrue(cli("runtime-image", "prune", "--older-than", "0s", image).stderr().contains("1 runtime image removed"));
    assertTrue(cli("runtime-image", "ls", image).out().contains("0 runtime images"));
  }

  private static Cli.Run launcher(String... args) {
    List<String> all = new ArrayList<>(List.of(args));
    all.add(2, "--plain-http");
    all.add(3, "--config");
    all.add(4, flatpull.config().toString());
    try {
      return Cli.launcher(all.toArray(String[]::new));
    } catch (IOException | InterruptedException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * The next version of the image, never run: one layer more that changes the first bytes of the file the recorded
   * runtime image carries most of from offset 0, and adds a file. Its runtime image is derived from the recorded one
   * by content: every extent of the old one is carried over but that file's first chunk.
   */
  @Test
  @Order(4)
  void buildFrom_derivesTheNextVersionsRuntimeImage_byContent_andMinOverlapRefusesBelowWhatItAsks() throws Exception {
    JsonNode index = JSON.readTree(cli("runtime-image", "show", "--json", image).stdout());
    JsonNode layer = index.get("layers").get(0);
    long traced = 0;
    String changed = null;
    long firstChunk = 0;
    for (JsonNode e : layer.get("extents")) {
      String path = layer.get("files").get(e.get(0).asInt()).asText();
      traced += e.get(2).asLong();
      // A compiled module: its bytes name its own source, so no other file of the image holds its first chunk.
      if (e.get(1).asLong() == 0 && path.endsWith(".pyc") && e.get(2).asLong() > firstChunk) {
        changed = path;
        firstChunk = e.get(2).asLong();
      }
    }
    assertTrue(changed != null, "the runtime image carries no compiled module from its start: " + layer);
    Path rootfs = DebianImage.pythonRootfs();
    byte[] content = Files.readAllBytes(rootfs.resolve(changed.substring(1)));
    content[0] ^= 1;
    String next = image.replace(":esgz", ":esgz-next");
    DebianImage.pushRootfsWithUpper(rootfs, java.util.Map.of(changed.substring(1), content,
        "srv/added.txt", "only in the next version\n".getBytes()), registry.address(), "it/python", "plain-next");
    assertEquals(0, Cli.inProcess("convert", "--plain-http", "--quiet", image.replace(":esgz", ":plain-next"), next)
        .exitCode());

    long started = System.nanoTime();
    Cli.Run derived = cli("runtime-image", "build", next, "--from", image, "--push");
    long millis = (System.nanoTime() - started) / 1_000_000;
    assertEquals(0, derived.exitCode(), derived.stderr());
    Matcher m = Pattern.compile("bytes: (\\d+) at the same path, (\\d+) moved; (\\d+) changed, taken from the new"
        + " file at the same path; (\\d+) gone").matcher(derived.stderr());
    assertTrue(m.find(), derived.stderr());
    long same = Long.parseLong(m.group(1));
    long moved = Long.parseLong(m.group(2));
    long taken = Long.parseLong(m.group(3));
    long gone = Long.parseLong(m.group(4));
    System.out.printf("derived in %d ms: %d of %d bytes carried over (%d moved), %d changed (%s's first chunk: %d),"
        + " %d gone%n", millis, same + moved, traced, moved, taken, changed, firstChunk, gone);
    assertEquals(traced, same + moved + taken + gone, derived.stderr());
    assertEquals(firstChunk, taken, "exactly the changed chunk is not carried by content: " + derived.stderr());
    assertEquals(0, gone, derived.stderr());

    JsonNode listed = JSON.readTree(cli("runtime-image", "ls", "--json", next).stdout());
    assertEquals(1, listed.size(), listed.toString());
    assertEquals("derived", listed.get(0).get("origin").asText());
    assertEquals(image + "@" + index.get("service").get("manifestDigest").asText(),
        listed.get(0).get("derivedFrom").asText(), "the older version, by reference and digest");
    assertEquals((traced - taken) / (double) traced, listed.get(0).get("overlap").asDouble(), 1e-4);
    assertTrue(cli("runtime-image", "ls", next).out().contains("derived "), "ls shows the origin");

    Cli.Run verified = cli("runtime-image", "show", "--verify", next);
    assertEquals(0, verified.exitCode(), verified.stderr() + verified.out());
    assertTrue(verified.out().contains("; 0 rejected"), verified.out());
    assertTrue(derived.stderr().contains("TOC read and verified") && derived.stderr().contains("read "),
        "progress: each layer's TOC and the chunks' fetch: " + derived.stderr());

    // Asked for all of it, the pair is refused: nothing written, nothing pushed.
    Path out = dir.resolve("all-or-nothing.fpri");
    Cli.Run refused = cli("runtime-image", "build", next, "--from", image, "--min-overlap", "100%", "--push", "--out",
        out.toString());
    assertEquals(9, refused.exitCode(), refused.stderr());
    assertTrue(refused.stderr().contains("not derived: ") && refused.stderr().contains("--min-overlap"),
        refused.stderr());
    assertTrue(Files.notExists(out));
    assertEquals(1, JSON.readTree(cli("runtime-image", "ls", "--json", next).stdout()).size());

    // An unrelated image has none of it: refused at any threshold.
    TestImage other = TestImage.push(registry, "it/unrelated", "plain");
    String unrelated = registry.address() + "/it/unrelated:esgz";
    assertEquals(0, Cli.inProcess("convert", "--plain-http", "--quiet", other.reference.toString(), unrelated)
        .exitCode());
    Cli.Run none = cli("runtime-image", "build", unrelated, "--from", image, "--out", out.toString());
    assertEquals(9, none.exitCode(), none.stderr());
    assertTrue(none.stderr().contains("(0.0 %"), none.stderr());
    assertTrue(Files.notExists(out));

    // Recorded on the version itself later, the same service's runtime image replaces the derived one.
    Cli.Run recorded = record(next, dir.resolve("next.fptrace"), true,
        "import json, http.server, email.parser, urllib.request, decimal, logging");
    assertEquals(0, recorded.exitCode(), recorded.stderr());
    assertTrue(recorded.stderr().contains("replaced 1 of the same service version"), recorded.stderr());
    JsonNode after = JSON.readTree(cli("runtime-image", "ls", "--json", next).stdout());
    assertEquals(1, after.size(), after.toString());
    assertEquals("recorded", after.get(0).get("origin").asText());
    // The node that recorded it loaded the derived runtime image at the pull; the recording saw every page anyway
    // (none was pushed into the kernel's cache while it recorded): as many as the same service's on the version before.
    long before = TraceFile.read(traceA).pages();
    long again = TraceFile.read(dir.resolve("next.fptrace")).pages();
    assertTrue(again >= 0.9 * before && again <= 1.1 * before, again + " pages recorded, " + before + " before");
  }

  @Test
  @Order(3)
  void badInput_throughTheCli_isRefusedWithStatusSevenAndTheReason() throws Exception {
    Path garbage = dir.resolve("garbage.fpri");
    Files.writeString(garbage, "this is not a runtime image, not even close");
    Cli.Run r = cli("runtime-image", "show", garbage.toString());
    assertEquals(7, r.exitCode(), r.stderr());
    assertTrue(r.stderr().contains("malformed runtime image: byte 0: not a flatpull runtime image"), r.stderr());

    Path out = dir.resolve("cut.fpri");
    assertEquals(0, cli("runtime-image", "build", image, "--trace", traceB.toString(), "--out", out.toString())
        .exitCode());
    byte[] whole = Files.readAllBytes(out);
    Files.write(out, Arrays.copyOf(whole, whole.length - 10));
    Cli.Run cut = cli("runtime-image", "show", out.toString());
    assertEquals(7, cut.exitCode(), cut.stderr());
    assertTrue(cut.stderr().contains("truncated inside frame"), cut.stderr());

    // A trace recorded on another image (the plain one) is refused for this image.
    Cli.Run other = cli("runtime-image", "build", image.replace(":esgz", ":plain"), "--trace", traceB.toString(),
        "--out", dir.resolve("x").toString());
    assertEquals(7, other.exitCode(), other.stderr());
    assertTrue(other.stderr().contains("does not fit the image: trace.service.manifestDigest"), other.stderr());
  }
}
