package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.Trace;
import dev.flatpull.trace.TraceFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code flatpull record} with real containerd, runc, registry and FUSE: traces of a Python one-liner and of an HTTP
 * server, until their probes pass.
 */
class RecordIT {
  private static final Cleanup cleanup = new Cleanup();
  private static FlatpullDaemon flatpull;
  private static ContainerdServer containerd;
  private static String image;
  @TempDir Path dir;

  @BeforeAll
  static void start() throws Exception {
    Processes.require("runc");
    RegistryServer registry = cleanup.add(RegistryServer.start());
    image = DebianImage.pushPythonEstargz(registry.address(), "it/python");
    flatpull = cleanup.add(FlatpullDaemon.start(""));
    containerd = cleanup.add(ContainerdServer.withFlatpull(flatpull.socket()));
  }

  @AfterAll
  static void stop() throws Exception {
    cleanup.close();
  }

  private Cli.Run record(Path out, List<String> probes, List<String> extra, String... command) {
    List<String> args = new ArrayList<>(List.of("record", "--config", flatpull.config().toString(), "--plain-http",
        "--containerd-address", containerd.socket().toString(), "--namespace", ContainerdServer.NAMESPACE,
        "--out", out.toString()));
    if (!extra.contains("--probe-timeout")) {
      args.addAll(List.of("--probe-timeout", "60s"));
    }
    probes.forEach(p -> args.addAll(List.of("--probe", p)));
    args.addAll(extra);
    args.add(image);
    args.add("--");
    args.addAll(List.of(command));
    return Cli.inProcess(args.toArray(String[]::new));
  }

  private static Set<String> files(Trace t) {
    Set<String> out = new HashSet<>();
    t.layers().forEach(l -> out.addAll(l.files()));
    return out;
  }

  @Test
  void anEnvironmentValue_reachesTheContainer_butNeitherTheTraceNorItsRuntimeImage() throws Exception {
    String secret = "s3cret-" + Long.toHexString(System.nanoTime());
    Path out = dir.resolve("env.fptrace");
    // The command checks the value by its hash: the command itself is recorded, and must not carry the value either.
    String hash = dev.flatpull.core.Digest.sha256(secret.getBytes(java.nio.charset.StandardCharsets.UTF_8)).hex();
    Cli.Run r = record(out, List.of("exit"), List.of("--env", "FLATPULL_TOKEN=" + secret), "/usr/bin/python3", "-c",
        "import hashlib, os, sys; sys.exit(0 if hashlib.sha256(os.environ.get('FLATPULL_TOKEN', '').encode())"
            + ".hexdigest() == '" + hash + "' else 3)");
    assertEquals(0, r.exitCode(), "the container ran with the value: " + r.stderr());
    Trace t = TraceFile.read(out);
    assertEquals(List.of("FLATPULL_TOKEN"), t.service().environment());
    byte[] trace;
    try (var in = new java.util.zip.GZIPInputStream(java.nio.file.Files.newInputStream(out))) {
      trace = in.readAllBytes();
    }
    assertFalse(new String(trace, java.nio.charset.StandardCharsets.UTF_8).contains(secret), "the trace has no value");
    Path blob = dir.resolve("env.runtime-image");
    Cli.Run build = Cli.inProcess("runtime-image", "build", "--config", flatpull.config().toString(), "--plain-http",
        "--trace", out.toString(), "--out", blob.toString(), image);
    assertEquals(0, build.exitCode(), build.stderr());
    byte[] built = java.nio.file.Files.readAllBytes(blob);
    var index = dev.flatpull.runtimeimage.RuntimeImageFormat.read(built).index();
    assertEquals(List.of("FLATPULL_TOKEN"), index.service().environment(), "the runtime image's index: names only");
    assertEquals(t.service().key(), index.service().key());
    assertFalse(new String(built, java.nio.charset.StandardCharsets.ISO_8859_1).contains(secret));
  }

  @Test
  void pythonImport_untilExit_readsTheInterpreterAndItsLibraries_andNothingElse() throws Exception {
    Path out = dir.resolve("python.fptrace");
    Cli.Run r = record(out, List.of("exit"), List.of("--runs", "2"), "/usr/bin/python3", "-c", "import json, http.server");
    assertEquals(0, r.exitCode(), r.stderr());
    System.out.print(r.stderr()); // progress, and which kernel knobs could not be narrowed
    Trace t = TraceFile.read(out);
    Set<String> files = files(t);
    assertTrue(files.contains("/usr/bin/python3.11"), files.toString());
    assertTrue(files.stream().anyMatch(f -> f.matches("/usr/lib/x86_64-linux-gnu/libc\\.so\\.6")), files.toString());
    assertTrue(files.stream().anyMatch(f -> f.startsWith("/usr/lib/python3.11/json/")), files.toString());
    assertTrue(files.stream().anyMatch(f -> f.startsWith("/usr/lib/python3.11/http/")), files.toString());
    assertTrue(files.stream().noneMatch(f -> f.startsWith("/usr/share/doc/") || f.startsWith("/usr/share/locale/")
        || f.startsWith("/usr/share/common-licenses/") || f.startsWith("/usr/lib/python3.11/unittest/")
        || f.startsWith("/usr/lib/python3.11/asyncio/")), files.toString());
    // Two cold starts of one service version: the same pages, up to the nondeterminism docs/traces.md describes.
    long pages = t.pages();
    long both = t.layers().stream().flatMap(l -> l.runs().stream()).filter(run -> run.frequency() == 2)
        .mapToLong(PageRun::pages).sum();
    System.out.printf("python one-liner: %d pages (%d files), %d of them read in both runs (%.1f%%), ready %s ms%n",
        pages, files.size(), both, 100.0 * both / pages, t.readyMillis());
    assertTrue(both >= 0.9 * pages, both + " of " + pages + " pages read in both runs");
    assertEquals(2, t.runs());

    Cli.Run show = Cli.inProcess("trace", "show", out.toString());
    assertEquals(0, show.exitCode(), show.stderr());
    assertTrue(show.out().contains("ready after") && show.out().contains("/usr/bin/python3.11"), show.out());

    Path other = dir.resolve("other.fptrace");
    assertEquals(0, record(other, List.of("exit"), List.of(), "/usr/bin/python3", "-c", "import json").exitCode());
    assertNotEquals(t.service().key(), TraceFile.read(other).service().key(), "another command, another service key");
    assertTrue(TraceFile.read(other).pages() < pages, "importing less reads less");
  }

  @Test
  void anHttpServer_untilItAnswers() throws Exception {
    int port = Processes.freePort();
    Path out = dir.resolve("http.fptrace");
    Cli.Run r = record(out, List.of("http://127.0.0.1:" + port + "/", "tcp://127.0.0.1:" + port), List.of(),
        "/usr/bin/python3", "-m", "http.server", Integer.toString(port), "--bind", "127.0.0.1", "--directory", "/srv");
    assertEquals(0, r.exitCode(), r.stderr());
    Trace t = TraceFile.read(out);
    Set<String> files = files(t);
    assertTrue(files.stream().anyMatch(f -> f.startsWith("/usr/lib/python3.11/http/")), files.toString());
    assertTrue(files.contains("/usr/bin/python3.11"), files.toString());
    assertTrue(files.stream().noneMatch(f -> f.startsWith("/usr/share/doc/")), files.toString());
    assertEquals(List.of("http://127.0.0.1:" + port + "/", "tcp://127.0.0.1:" + port), t.service().probes());
    System.out.printf("http.server: %d pages, ready after %s ms%n", t.pages(), t.readyMillis());
    assertTrue(containerd.ctrOk("container", "list", "-q").stdout().isBlank(), "the container was not removed");
  }

  @Test
  void aProbeThatNeverPasses_timesOut_andWritesNoTrace() throws Exception {
    Path out = dir.resolve("never.fptrace");
    Cli.Run r = record(out, List.of("tcp://127.0.0.1:1"), List.of("--probe-timeout", "3s"), "/bin/sleep", "60");
    assertEquals(8, r.exitCode(), r.stderr());
    assertTrue(r.stderr().contains("timed out") && r.stderr().contains("tcp://127.0.0.1:1"), r.stderr());
    assertFalse(Files.exists(out));
    Cli.Run exited = record(out, List.of("http://127.0.0.1:1/"), List.of(), "/bin/false");
    assertEquals(8, exited.exitCode(), exited.stderr());
    assertTrue(exited.stderr().contains("exited with status 1"), exited.stderr());
    assertFalse(Files.exists(out));
  }

  @Test
  void malformedAndTruncatedTraces_areRejectedWithWhereAndWhy() throws Exception {
    Path garbage = dir.resolve("garbage.fptrace");
    Files.writeString(garbage, "not a trace at all");
    Cli.Run r = Cli.inProcess("trace", "show", garbage.toString());
    assertEquals(7, r.exitCode());
    assertTrue(r.stderr().contains("malformed trace") && r.stderr().contains("not a gzip"), r.stderr());
    Path good = dir.resolve("good.fptrace");
    assertEquals(0, record(good, List.of("exit"), List.of(), "/bin/true").exitCode());
    byte[] bytes = Files.readAllBytes(good);
    Path cut = dir.resolve("cut.fptrace");
    Files.write(cut, java.util.Arrays.copyOf(bytes, bytes.length / 2));
    Cli.Run truncated = Cli.inProcess("trace", "show", cut.toString());
    assertEquals(7, truncated.exitCode());
    assertTrue(truncated.stderr().contains("truncated") || truncated.stderr().contains("byte"), truncated.stderr());
  }
}
