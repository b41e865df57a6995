package dev.flatpull.it.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.it.Cli;
import dev.flatpull.it.ContainerdServer;
import dev.flatpull.it.DebianImage;
import dev.flatpull.it.DocumentedSetUp;
import dev.flatpull.it.FlatpullDaemon;
import dev.flatpull.it.MemoryCgroup;
import dev.flatpull.it.LinkEmulator;
import dev.flatpull.it.MetricsEndpoint;
import dev.flatpull.it.Processes;
import dev.flatpull.it.RegistryServer;
import dev.flatpull.it.Skopeo;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;

/**
 * Cold-start readiness through containerd over an emulated registry link ({@link LinkEmulator}), side by side in one
 * run with what a user would otherwise pick. Each measurement is a true cold start: fresh containerd (content and
 * snapshots), fresh snapshotter state and page cache, kernel caches dropped, the snapshotter's daemons already
 * running; timed from the pull's start to readiness and split into pull, create and start-to-ready. Repetition is the
 * outer loop, so drift hits every mode alike.
 *
 * <pre>
 *   bin/benchmark-coldstart [--images python,http,jvm,database] [--link 20ms/200mbit]... [--runs 3]
 *                           [--modes overlayfs,lazy,lazy-nobg,runtime-image,warm,stargz,stargz-opt]
 *                           [--formats flatpull,ctr-remote] [--stargz BINARY] [--out DIR]
 *                           [--baseline-root DIR] [--check] [--smoke]
 * </pre>
 *
 * Modes: {@code overlayfs} (containerd's own full pull of the gzip image), {@code lazy} (flatpull's default
 * configuration, no runtime image looked for), {@code lazy-nobg} (the same with background fetch off), {@code
 * runtime-image} (flatpull's default configuration starting from the service's runtime image, recorded and pushed
 * before anything is timed), {@code runtime-image-libfuse} and {@code lazy-libfuse} ({@code runtime-image} and {@code lazy}
 * with {@code [fuse] engine = "libfuse"}: what the kernel engine buys), {@code runtime-image-passthrough},
 * {@code lazy-passthrough} and {@code warm-passthrough} (row {@code warm-flatpull-passthrough}: the same with
 * {@code [fuse] passthrough = true}: what passthrough costs and buys), {@code lazy-nowarmup}
 * and {@code runtime-image-nowarmup} ({@code lazy} and {@code runtime-image} with {@code [snapshotter] warm_up =
 * false}: what the processes' warm-ups buy a node's first start), {@code lazy-booted} and {@code runtime-image-booted}
 * (the pull a second after the daemon answered and started its FUSE manager: a node that has just booted), {@code warm} (a second
 * start of the service on the same node, kernel caches dropped, once on overlayfs and once on flatpull: rows {@code
 * warm-overlayfs} and {@code warm-flatpull}), {@code stargz} (stargz-snapshotter 0.12's daemon, when {@code --stargz}
 * names it), {@code stargz-opt} (the same on the image optimized for the workload by {@code ctr-remote image
 * optimize}), {@code runtime-image-derived} (the service's next version, never run, starting from the runtime image
 * {@code runtime-image build --from} derived from the recorded one's), {@code runtime-image-next} (the same next
 * version starting from a runtime image recorded on it), {@code runtime-image-borrowed} (a copy of the next version
 * with no runtime image: the node borrows the recorded version's) and {@code lazy-next} (the next version lazily);
 * the next version is the image with one layer more that changes a file the service reads at start and adds a
 * package it does not (see {@link #pushNextVersions}); flatpull's format only. {@code --formats}: the lazy modes run
 * on eStargz made by {@code flatpull convert} (16 KiB chunks) and by
 * {@code ctr-remote image convert} (its own chunking), and on request ({@code flatpull-zstd}, {@code skopeo-zstd}) on
 * zstd:chunked made by {@code flatpull convert --format zstd-chunked} and by {@code skopeo copy
 * --dest-compress-format zstd:chunked} (containers/storage's compressor, as podman and buildah push it). {@code --baseline-root} adds {@code lazy-baseline}: flatpull's
 * default configuration (no runtime image looked for) run from the jar of another built source tree, so that a change is
 * measured before and after in one run; mode {@code runtime-image-baseline} is the same tree with the service's
 * runtime image, and {@code runtime-image-borrowed-baseline} that tree borrowing as {@code runtime-image-borrowed} does.
 *
 * <p>Writes {@code results.jsonl} (one line per start, as it is measured), {@code images.json}, {@code results.md},
 * {@code results.svg} and the registry's request log under {@code --out}. {@code --check} exits 1 when a start did not
 * reach readiness or a runtime-image start fell back; {@code --smoke} is the reduced run CI makes (python, one
 * repetition, a 2 ms / 1 Gbit link, flatpull's format, the optimized image compressed at gzip level 1 instead of 9,
 * {@code --check}).
 *
 * <p>Images, built from Debian's packages once and cached ({@link Workload}): {@code python} (Debian + python3; ready
 * when {@code python3 -c "import json, http.server, email.parser, urllib.request, decimal, logging, argparse"} exits),
 * {@code http} (Debian + nginx-light; ready at the first HTTP 200 on port 80), {@code jvm} (Debian + a headless JDK
 * running a small HTTP server from a jar; ready at its first HTTP 200 on port 8080) and {@code database} (Debian +
 * postgresql; ready when {@code pg_isready} passes on port 5432). {@code --images} defaults to all four.
 */
public final class ColdStartBenchmark {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** Modes that read the lazy eStargz image, once per {@code --formats} entry. */
  private static final String LIBFUSE = "[fuse]\nengine = \"libfuse\"\n";
  private static final String PASSTHROUGH = "[fuse]\npassthrough = true\n";
  private static final List<String> PER_FORMAT = List.of("lazy", "lazy-nobg", "lazy-nowarmup", "lazy-baseline",
      "runtime-image", "runtime-image-libfuse", "lazy-libfuse", "runtime-image-nowarmup", "runtime-image-baseline", "stargz",
      "lazy-passthrough", "runtime-image-passthrough", "lazy-booted", "runtime-image-booted");
  /** Modes on the service's next version, which only flatpull's own format has. */
  private static final List<String> NEXT_VERSION = List.of("runtime-image-derived", "runtime-image-next",
      "runtime-image-borrowed", "runtime-image-borrowed-baseline", "lazy-next");
  /**
   * The next version's tags: the one that gets a derived runtime image and a copy that gets a recorded one, in the
   * image's repository; and a copy that gets none, in a repository of its own ({@link #nextRepository}) where the
   * only runtime image is the previous version's, which a node borrows.
   */
  private static final Map<String, String> NEXT_TAGS = Map.of("runtime-image-derived", "esgz-next",
      "runtime-image-next", "esgz-next-rec", "runtime-image-borrowed", "esgz-next", "runtime-image-borrowed-baseline",
      "esgz-next", "lazy-next", "esgz-next");

  /** The repository of the next version a mode starts. */
  private static String nextRepository(String image, String mode) {
    return mode.startsWith("runtime-image-borrowed") || mode.equals("lazy-next") ? "bench/" + image + "-pair"
        : "bench/" + image;
  }
  private static final Map<String, String> TAGS = Map.of("gzip", "plain", "flatpull", "esgz", "ctr-remote",
      "ctr-esgz", "ctr-remote-opt", "ctr-opt", "flatpull-zstd", "zstd", "skopeo-zstd", "skopeo-zstd");

  private final LinkEmulator link;
  private final RegistryServer registry;
  private final Path stargz;
  private final String baselineRoot;
  private final int optimizeLevel;
  // When the daemon of a "-booted" mode's node answered (and started its FUSE manager).
  private long daemonAnswered;

  private ColdStartBenchmark(RegistryServer registry, LinkEmulator link, Path stargz, String baselineRoot,
      int optimizeLevel) {
    this.optimizeLevel = optimizeLevel;
    this.registry = registry;
    this.link = link;
    this.stargz = stargz;
    this.baselineRoot = baselineRoot;
  }

  /** One start to measure: a mode on one format of an image. */
  private record Plan(String mode, String format) {}

  public static void main(String[] args) throws Exception {
    List<String> images = Workload.NAMES;
    List<String> links = new ArrayList<>();
    List<String> modes = new ArrayList<>(List.of("overlayfs", "lazy", "lazy-nobg", "runtime-image", "warm", "stargz",
        "stargz-opt"));
    List<String> formats = List.of("flatpull", "ctr-remote");
    int runs = 3;
    Path stargz = null;
    Path out = Path.of("benchmarks/target/coldstart");
    String baselineRoot = null;
    boolean check = false;
    int optimizeLevel = 9;
    int atRestSeconds = 60;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--images" -> {
          images = List.of(args[++i].split(","));
          images.forEach(Workload::of); // an unknown name fails here, before anything is built
        }
        case "--link" -> links.add(args[++i]);
        case "--runs" -> runs = Integer.parseInt(args[++i]);
        case "--modes" -> modes = new ArrayList<>(List.of(args[++i].split(",")));
        case "--formats" -> formats = List.of(args[++i].split(","));
        case "--stargz" -> stargz = Path.of(args[++i]);
        case "--out" -> out = Path.of(args[++i]);
        case "--baseline-root" -> baselineRoot = args[++i];
        case "--check" -> check = true;
        case "--at-rest" -> atRestSeconds = Integer.parseInt(args[++i]);
        case "--smoke" -> {
          images = List.of("python");
          links.add("2ms/1gbit");
          runs = 1;
          formats = List.of("flatpull");
          check = true;
          optimizeLevel = 1;
          atRestSeconds = 0;
        }
        default -> throw new IllegalArgumentException("unknown argument " + args[i]);
      }
    }
    if (baselineRoot != null && !modes.contains("lazy-baseline")) {
      modes.add(0, "lazy-baseline");
    }
    if (links.isEmpty()) {
      links.add("20ms/200mbit");
    }
    if (stargz == null && modes.removeIf(m -> m.startsWith("stargz"))) {
      progress("no --stargz BINARY: modes stargz and stargz-opt left out (bin/build-stargz OUT builds it)");
    }
    List<Plan> plan = new ArrayList<>();
    for (String mode : modes) {
      if (mode.equals("warm")) {
        plan.add(new Plan("warm-overlayfs", "gzip"));
        plan.add(new Plan("warm-flatpull", "flatpull"));
      } else if (mode.equals("warm-passthrough")) {
        plan.add(new Plan("warm-flatpull-passthrough", "flatpull"));
      } else if (mode.equals("overlayfs")) {
        plan.add(new Plan(mode, "gzip"));
      } else if (mode.equals("stargz-opt")) {
        plan.add(new Plan(mode, "ctr-remote-opt"));
      } else if (NEXT_VERSION.contains(mode)) {
        plan.add(new Plan(mode, "flatpull"));
      } else if (PER_FORMAT.contains(mode)) {
        formats.forEach(f -> plan.add(new Plan(mode, f)));
      } else {
        throw new IllegalArgumentException("unknown mode " + mode);
      }
    }
    Files.createDirectories(out);
    Files.deleteIfExists(out.resolve("results.jsonl"));
    Processes.require("runc");
    List<ColdStartResult> results = new ArrayList<>();
    Map<String, ColdStartReport.ImageSizes> sizes = new LinkedHashMap<>();
    try (RegistryServer registry = RegistryServer.start();
        LinkEmulator link = LinkEmulator.start(registry.address(), LinkEmulator.Link.parse(links.get(0)))) {
      ColdStartBenchmark bench = new ColdStartBenchmark(registry, link, stargz, baselineRoot, optimizeLevel);
      for (String image : images) {
        sizes.put(image, bench.prepare(image, plan));
      }
      Files.writeString(out.resolve("images.json"), JSON.writerWithDefaultPrettyPrinter()
          .writeValueAsString(sizes.values()));
      for (int run = 1; run <= runs; run++) {
        for (String l : links) {
          link.setLink(LinkEmulator.Link.parse(l));
          for (String image : images) {
            for (Plan p : plan) {
              progress(String.format("run %d/%d, %s, %s, %s on %s", run, runs, l, image, p.mode(), p.format()));
              ColdStartResult r = bench.measure(run, image, l, p);
              progress(r.reachedReadiness() ? String.format(Locale.ROOT,
                  "  ready after %.2f s (pull %.2f, create %.2f, start %.2f), %d requests, %.1f MB%s", r.readyMillis()
                      / 1000.0, r.pullMillis() / 1000.0, r.createMillis() / 1000.0, r.startMillis() / 1000.0,
                  r.requests(), r.bytesDown() / 1e6, r.hitRatio() < 0 ? "" : String.format(Locale.ROOT,
                      ", hit ratio %.3f, fallbacks %d", r.hitRatio(), r.fallbacks()))
                  : "  NOT READY: " + r.error());
              results.add(r);
              Files.writeString(out.resolve("results.jsonl"), JSON.writeValueAsString(r) + "\n",
                  StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            }
          }
        }
      }
      Files.writeString(out.resolve("requests.log"), link.logText());
    }
    String atRest = atRestSeconds <= 0 ? "" : atRest(atRestSeconds, baselineRoot);
    ColdStartReport report = new ColdStartReport(results, sizes);
    String table = report.markdown() + atRest;
    Files.writeString(out.resolve("results.md"), table);
    Files.writeString(out.resolve("results.svg"), ColdStartChart.svg(report));
    System.out.print(table);
    progress("results in " + out.toAbsolutePath() + ": results.jsonl, images.json, results.md, results.svg");
    if (check) {
      List<String> problems = report.problems();
      problems.forEach(p -> progress("FAILED: " + p));
      if (!problems.isEmpty()) {
        System.exit(1);
      }
      progress("check passed: every start reached readiness; no runtime-image start fell back");
    }
  }

  /**
   * Pushes {@code image} in every format {@code plan} needs, records and pushes its runtime images, and returns its
   * sizes. Nothing here is timed.
   */
  private ColdStartReport.ImageSizes prepare(String image, List<Plan> plan) throws Exception {
    Workload service = Workload.of(image);
    Path rootfs = service.rootfs();
    progress("pushing the " + image + " image and converting it to eStargz");
    String repo = registry.address() + "/bench/" + image;
    ImageReference plain = DebianImage.pushRootfs(rootfs, registry.address(), "bench/" + image, "plain");
    Cli.Run c = Cli.inProcess("convert", "--plain-http", "--quiet", plain.toString(), repo + ":esgz");
    if (c.exitCode() != 0) {
      throw new IOException("convert failed: " + c.stderr());
    }
    List<String> formats = new ArrayList<>(List.of("gzip", "flatpull"));
    plan.stream().map(Plan::format).filter(f -> !formats.contains(f)).forEach(formats::add);
    if (formats.contains("ctr-remote") || formats.contains("ctr-remote-opt")) {
      try (ContainerdServer containerd = ContainerdServer.start()) {
        containerd.ctrOk("image", "pull", "--plain-http", plain.toString());
        if (formats.contains("ctr-remote")) {
          progress("converting " + image + " with ctr-remote image convert");
          containerd.ctrOk("image", "convert", "--estargz", "--oci", plain.toString(), repo + ":ctr-esgz");
          containerd.ctrOk("image", "push", "--plain-http", repo + ":ctr-esgz");
        }
        if (formats.contains("ctr-remote-opt")) {
          progress("optimizing " + image + " for its workload with ctr-remote image optimize");
          List<String> cmd = service.command();
          // The workload runs in a sandbox for --period seconds (or until it exits): nginx is killed after it. The
          // smoke run compresses at level 1 (level 9, ctr-remote's default, takes about a minute on 2 cores).
          containerd.ctrOk("image", "optimize", "--oci", "--period", "5", "--estargz-compression-level",
              Integer.toString(optimizeLevel),
              "--entrypoint", JSON.writeValueAsString(cmd.subList(0, 1)),
              "--args", JSON.writeValueAsString(cmd.subList(1, cmd.size())), plain.toString(), repo + ":ctr-opt");
          containerd.ctrOk("image", "push", "--plain-http", repo + ":ctr-opt");
        }
      }
    }
    if (formats.contains("flatpull-zstd")) {
      progress("converting " + image + " to zstd:chunked with flatpull convert");
      Cli.Run z = Cli.inProcess("convert", "--plain-http", "--quiet", "--format", "zstd-chunked", plain.toString(),
          repo + ":" + TAGS.get("flatpull-zstd"));
      if (z.exitCode() != 0) {
        throw new IOException("convert failed: " + z.stderr());
      }
    }
    if (formats.contains("skopeo-zstd")) {
      progress("pushing " + image + " as zstd:chunked with skopeo copy");
      Path layout = DebianImage.ociLayout(rootfs, Files.createTempDirectory("flatpull-bench-oci"), "plain");
      try {
        Skopeo.copy(List.of("--dest-tls-verify=false", "--dest-compress-format", "zstd:chunked",
            "oci:" + layout + ":plain", "docker://" + repo + ":" + TAGS.get("skopeo-zstd")), 600);
      } finally {
        Processes.deleteTree(layout);
      }
    }
    Map<String, Long> compressed = new LinkedHashMap<>();
    for (String f : formats) {
      compressed.put(f, compressedBytes(repo + ":" + TAGS.get(f)));
    }
    boolean next = plan.stream().anyMatch(p -> NEXT_VERSION.contains(p.mode()));
    if (next) {
      pushNextVersions(service, rootfs);
    }
    Map<String, Long> runtimeImages = new LinkedHashMap<>();
    for (String f : formats) {
      if (plan.stream().anyMatch(p -> p.mode().startsWith("runtime-image") && p.format().equals(f))) {
        // Recorded and pushed before anything is timed, as CI does per service version.
        link.setLink(LinkEmulator.Link.parse("1ms/10gbit"));
        progress("recording " + image + " on " + f + " and pushing its runtime image");
        String ref = link.address() + "/bench/" + image + ":" + TAGS.get(f);
        service.recordRuntimeImage(ref);
        runtimeImages.put(f, runtimeImageBytes(ref));
      }
    }
    if (next) {
      link.setLink(LinkEmulator.Link.parse("1ms/10gbit"));
      String base = link.address() + "/bench/" + image + ":";
      progress("recording " + image + "'s next version and pushing its runtime image");
      service.recordRuntimeImage(base + NEXT_TAGS.get("runtime-image-next"));
      runtimeImages.put("flatpull-next", runtimeImageBytes(base + NEXT_TAGS.get("runtime-image-next")));
      long started = System.nanoTime();
      Cli.Run d = Cli.inProcess("runtime-image", "build", "--plain-http", base + NEXT_TAGS.get("runtime-image-derived"),
          "--from", base + TAGS.get("flatpull"), "--push");
      if (d.exitCode() != 0) {
        throw new IOException("deriving " + image + "'s next version failed: " + d.stderr());
      }
      progress(String.format(Locale.ROOT, "derived %s's next version's runtime image in %.2f s (the command, start to"
          + " end): %s", image, (System.nanoTime() - started) / 1e9, d.stderr().lines()
          .filter(l -> l.startsWith("carried over")).findFirst().orElse("?")));
      runtimeImages.put("flatpull-derived", runtimeImageBytes(base + NEXT_TAGS.get("runtime-image-derived")));
      progress("recording " + image + " in the repository of the next version with no runtime image");
      service.recordRuntimeImage(link.address() + "/" + nextRepository(image, "runtime-image-borrowed") + ":"
          + TAGS.get("flatpull"));
    }
    return new ColdStartReport.ImageSizes(image, compressed, runtimeImages);
  }

  /**
   * Pushes the service's next version, three times ({@link #NEXT_TAGS}: the same content under three manifests, so
   * that one can carry a derived runtime image, one a recorded one and one none, the last beside the previous version
   * in a repository of its own): the image and one layer more, which changes a file the service reads at start
   * ({@link Workload#nextVersionOf}: python's {@code argparse.py}, whose compiled module is then stale; nginx's and
   * postgresql's configuration; the JVM service's jar) and adds a package it does not read (8 MiB of data under
   * {@code opt/}).
   */
  private void pushNextVersions(Workload service, Path rootfs) throws Exception {
    String image = service.name();
    String changed = service.changedByNextVersion();
    byte[] appended = service.nextVersionOf(Files.readAllBytes(rootfs.resolve(changed)));
    java.util.Random random = new java.util.Random(42);
    String pair = nextRepository(image, "runtime-image-borrowed");
    progress("pushing " + image + " to " + pair + ", beside its next version");
    ImageReference previous = DebianImage.pushRootfs(rootfs, registry.address(), pair, "plain");
    Cli.Run converted = Cli.inProcess("convert", "--plain-http", "--quiet", previous.toString(),
        registry.address() + "/" + pair + ":" + TAGS.get("flatpull"));
    if (converted.exitCode() != 0) {
      throw new IOException("convert failed: " + converted.stderr());
    }
    for (String mode : List.of("runtime-image-derived", "runtime-image-next", "runtime-image-borrowed")) {
      String tag = NEXT_TAGS.get(mode);
      String repository = nextRepository(image, mode);
      Map<String, byte[]> upper = new LinkedHashMap<>();
      upper.put(changed, appended);
      for (int i = 0; i < 64; i++) {
        byte[] data = new byte[128 * 1024];
        random.setSeed(i);
        random.nextBytes(data);
        upper.put(String.format(Locale.ROOT, "opt/package/data-%02d.bin", i), data);
      }
      upper.put("etc/flatpull-bench-copy",
          (repository + ":" + tag).getBytes(java.nio.charset.StandardCharsets.US_ASCII));
      progress("pushing " + image + "'s next version as " + repository + ":" + tag);
      ImageReference plain = DebianImage.pushRootfsWithUpper(rootfs, upper, registry.address(), repository,
          "plain-" + tag);
      Cli.Run c = Cli.inProcess("convert", "--plain-http", "--quiet", plain.toString(),
          registry.address() + "/" + repository + ":" + tag);
      if (c.exitCode() != 0) {
        throw new IOException("convert failed: " + c.stderr());
      }
    }
  }

  static long compressedBytes(String ref) throws IOException {
    Cli.Run r = Cli.inProcess("inspect", "--plain-http", "--json", ref);
    if (r.exitCode() != 0) {
      throw new IOException("inspect " + ref + " failed: " + r.stderr());
    }
    long total = 0;
    for (JsonNode l : JSON.readTree(r.stdout()).path("layers")) {
      total += l.path("compressedSize").asLong();
    }
    return total;
  }

  private static long runtimeImageBytes(String ref) throws IOException {
    Cli.Run r = Cli.inProcess("runtime-image", "ls", "--plain-http", "--json", ref);
    if (r.exitCode() != 0) {
      throw new IOException("runtime-image ls " + ref + " failed: " + r.stderr());
    }
    JsonNode listed = JSON.readTree(r.stdout());
    if (listed.isEmpty()) {
      throw new IOException("no runtime image listed for " + ref);
    }
    return listed.get(0).path("size").asLong();
  }

  /** The node a mode runs on: containerd, its snapshotter's name, and the snapshotter's processes. */
  private record Node(ContainerdServer containerd, String snapshotter, Optional<FlatpullDaemon> flatpull,
      Optional<MetricsEndpoint> managerMetrics, Optional<MetricsEndpoint> daemonMetrics, Optional<Process> stargz,
      Optional<Path> stargzRoot, Optional<MemoryCgroup> group) implements AutoCloseable {
    /** The snapshotter's processes: flatpull's daemon and manager, or stargz-snapshotter's daemon. */
    List<Long> pids() throws IOException, InterruptedException {
      List<Long> out = new ArrayList<>();
      long d = flatpull.map(FlatpullDaemon::pid).or(() -> stargz.map(Process::pid)).orElse(-1L);
      out.add(d);
      out.add(flatpull.isPresent() ? flatpull.get().managerPid() : -1L);
      return out;
    }

    /** Starts the peaks of a start: each process's VmHWM and the group's peak from what they hold now. */
    void resetPeaks() throws IOException, InterruptedException {
      for (long pid : pids()) {
        if (pid > 0) {
          Processes.resetPeakResident(pid);
        }
      }
      if (group.isPresent()) {
        group.get().resetPeak();
      }
    }

    ColdStartResult.Peaks peaks() throws IOException, InterruptedException {
      List<Long> pids = pids();
      return new ColdStartResult.Peaks(pids.get(0) > 0 ? Processes.peakResidentBytes(pids.get(0)) : -1,
          pids.get(1) > 0 ? Processes.peakResidentBytes(pids.get(1)) : -1,
          group.isPresent() ? group.get().peakBytes() : -1, group.isPresent() ? group.get().limitBytes() : -1,
          group.isPresent() ? group.get().oomKills() : -1);
    }

    long daemonRss() {
      return flatpull.map(FlatpullDaemon::pid).or(() -> stargz.map(Process::pid))
          .map(Processes::residentBytes).orElse(-1L);
    }

    long managerRss() throws IOException, InterruptedException {
      if (flatpull.isEmpty()) {
        return -1;
      }
      long pid = flatpull.get().managerPid();
      return pid < 0 ? -1 : Processes.residentBytes(pid);
    }

    @Override
    public void close() throws Exception {
      try (AutoCloseable g = group.isPresent() ? group.get() : () -> {}) {
        containerd.close();
      } finally {
        if (flatpull.isPresent()) {
          flatpull.get().close();
        }
        if (stargz.isPresent()) {
          stargz.get().destroy();
          stargz.get().waitFor();
          for (Path m : dev.flatpull.core.MountTable.under(stargzRoot.orElseThrow())) {
            Processes.run(List.of("umount", "-l", m.toString()), 10);
          }
          Processes.deleteTree(stargzRoot.orElseThrow());
        }
      }
    }
  }

  private Node node(String mode) throws Exception {
    return switch (mode) {
      case "overlayfs", "warm-overlayfs" -> new Node(ContainerdServer.start(), "overlayfs", Optional.empty(),
          Optional.empty(), Optional.empty(), Optional.empty(), Optional.empty(), Optional.empty());
      case "stargz", "stargz-opt" -> {
        Path root = Files.createTempDirectory(Path.of("/var/tmp"), "stargz-");
        Path socket = root.resolve("stargz.sock");
        MemoryCgroup group = newGroup();
        Process p = new ProcessBuilder(group.wrap(List.of(stargz.toString(), "--root", root.resolve("root").toString(),
            "--address", socket.toString(), "--log-level", "warn"))).redirectErrorStream(true)
            .redirectOutput(root.resolve("stargz.log").toFile()).start();
        for (int i = 0; i < 100 && !Files.exists(socket); i++) {
          Thread.sleep(100);
        }
        yield new Node(ContainerdServer.withProxySnapshotter("stargz", socket), "stargz", Optional.empty(),
            Optional.empty(), Optional.empty(), Optional.of(p), Optional.of(root), Optional.of(group));
      }
      default -> flatpullNode(mode);
    };
  }

  /**
   * What flatpull's two processes hold at rest: started with the default configuration (warm-ups on) and nothing
   * mounted, {@code seconds} after the daemon started; this build's and, with {@code baselineRoot}, that build's, in
   * the same run. A Markdown table.
   */
  static String atRest(int seconds, String baselineRoot) throws Exception {
    StringBuilder b = new StringBuilder("\n| at rest, " + seconds + " s after `serve` started | daemon RSS, MiB |"
        + " manager RSS, MiB | together, MiB | memory group, MiB |\n|---|---|---|---|---|\n");
    List<String> builds = new ArrayList<>(List.of("this build"));
    if (baselineRoot != null) {
      builds.add("baseline");
    }
    for (String build : builds) {
      progress("at rest: " + build + ", " + seconds + " s");
      String own = System.getProperty("flatpull.root", "..");
      if (build.equals("baseline")) {
        System.setProperty("flatpull.root", baselineRoot);
      }
      MemoryCgroup group = newGroup();
      FlatpullDaemon d;
      try {
        d = FlatpullDaemon.startIn(group, "", true, "");
      } finally {
        System.setProperty("flatpull.root", own);
      }
      long started = System.nanoTime();
      try (group; d) {
        d.awaitManager();
        Thread.sleep(Math.max(0, seconds * 1000L - (System.nanoTime() - started) / 1_000_000));
        long daemon = Processes.residentBytes(d.pid());
        long manager = Processes.residentBytes(d.managerPid());
        long used = group.usageBytes();
        b.append(String.format(Locale.ROOT, "| %s | %d | %d | %d | %d |%n", build, daemon >> 20, manager >> 20,
            (daemon + manager) >> 20, used >> 20));
      }
    }
    b.append(floor(seconds));
    return b.toString();
  }

  /**
   * The floor of what flatpull's two processes hold: two JVMs started as the daemon and its FUSE manager are (the
   * documented unit's options, the manager's default options, the same jar on the class path) whose main does nothing
   * ({@link IdleJvm}), measured as {@link #atRest} measures them, in one memory group. A row of its table.
   */
  static String floor(int seconds) throws Exception {
    progress("at rest: the floor, two idle JVMs, " + seconds + " s");
    String classpath = FlatpullDaemon.jar() + ":" + Path.of(IdleJvm.class.getProtectionDomain().getCodeSource()
        .getLocation().toURI());
    List<List<String>> commands = new ArrayList<>();
    for (List<String> options : List.of(DocumentedSetUp.daemonJavaOptions(),
        dev.flatpull.config.SnapshotterSettings.FUSE_MANAGER_JAVA_OPTIONS)) {
      List<String> cmd = new ArrayList<>(List.of("java"));
      cmd.addAll(options);
      cmd.addAll(List.of("-cp", classpath, IdleJvm.class.getName()));
      commands.add(cmd);
    }
    MemoryCgroup group = newGroup();
    List<Process> jvms = new ArrayList<>();
    try (group) {
      for (List<String> cmd : commands) {
        jvms.add(new ProcessBuilder(group.wrap(cmd)).redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.DISCARD).start());
      }
      Thread.sleep(seconds * 1000L);
      for (Process p : jvms) {
        if (!p.isAlive()) {
          throw new IOException("an idle JVM exited " + p.exitValue() + ": " + commands.get(jvms.indexOf(p)));
        }
      }
      long daemon = Processes.residentBytes(jvms.get(0).pid());
      long manager = Processes.residentBytes(jvms.get(1).pid());
      long used = group.usageBytes();
      return String.format(Locale.ROOT, "| floor: two idle JVMs, the same options and jar | %d | %d | %d | %d |%n",
          daemon >> 20, manager >> 20, (daemon + manager) >> 20, used >> 20);
    } finally {
      for (Process p : jvms) {
        p.destroyForcibly().waitFor();
      }
    }
  }

  private Node flatpullNode(String mode) throws Exception {
    int managerPort = Processes.freePort();
    int daemonPort = Processes.freePort();
    String metrics = "fuse_manager_metrics_address = \"127.0.0.1:" + managerPort + "\"\n"
        + "metrics_address = \"127.0.0.1:" + daemonPort + "\"\n";
    FlatpullDaemon d;
    MemoryCgroup group = newGroup();
    Optional<MetricsEndpoint> endpoint = Optional.of(new MetricsEndpoint(managerPort));
    Optional<MetricsEndpoint> daemonEndpoint = Optional.of(new MetricsEndpoint(daemonPort));
    switch (mode) {
      case "lazy" -> d = FlatpullDaemon.startIn(group, metrics, true, "[runtime_image]\nload = false\n");
      // Lazy loading alone: a runtime image the registry may list for the image is not looked for.
      case "lazy-nobg", "warm-flatpull" -> d = FlatpullDaemon.startIn(group, metrics + "background_fetch = false", true,
          "[runtime_image]\nload = false\n");
      case "runtime-image", "runtime-image-derived", "runtime-image-next", "runtime-image-borrowed" ->
          d = FlatpullDaemon.startIn(group, metrics, true, "");
      case "lazy-next" -> d = FlatpullDaemon.startIn(group, metrics, true, "[runtime_image]\nload = false\n");
      case "runtime-image-libfuse" -> d = FlatpullDaemon.startIn(group, metrics, true, LIBFUSE);
      case "lazy-libfuse" -> d = FlatpullDaemon.startIn(group, metrics, true, "[runtime_image]\nload = false\n" + LIBFUSE);
      // With passthrough: every open answered, files complete on the node read by the kernel from backing files.
      case "runtime-image-passthrough" -> d = FlatpullDaemon.startIn(group, metrics, true, PASSTHROUGH);
      case "lazy-passthrough" -> d = FlatpullDaemon.startIn(group, metrics, true, "[runtime_image]\nload = false\n"
          + PASSTHROUGH);
      case "warm-flatpull-passthrough" -> d = FlatpullDaemon.startIn(group, metrics + "background_fetch = false",
          true, "[runtime_image]\nload = false\n" + PASSTHROUGH);
      // The same without the processes' warm-ups ([snapshotter] warm_up = false): what the warm-up buys a start.
      case "lazy-nowarmup" -> d = FlatpullDaemon.startIn(group, metrics + "warm_up = false", true,
          "[runtime_image]\nload = false\n");
      case "runtime-image-nowarmup" -> d = FlatpullDaemon.startIn(group, metrics + "warm_up = false", true, "");
      // A node that has just booted: the daemon has answered and started its FUSE manager, which the pull finds
      // still warming up (measure() pulls a second after the daemon answered).
      case "runtime-image-booted" -> d = FlatpullDaemon.startIn(group, metrics, true, "");
      case "lazy-booted" -> d = FlatpullDaemon.startIn(group, metrics, true, "[runtime_image]\nload = false\n");
      case "lazy-baseline", "runtime-image-baseline", "runtime-image-borrowed-baseline" -> {
        // The daemon and its FUSE manager run from that tree's jar, with its defaults; lazy-baseline without runtime
        // images, which the registry holds for these images: the tree must know [runtime_image] load (any build
        // since runtime images are loaded). No metrics from it: it may not know this build's other settings.
        String own = System.getProperty("flatpull.root", "..");
        System.setProperty("flatpull.root", baselineRoot);
        try {
          d = FlatpullDaemon.startIn(group, "", true, mode.equals("lazy-baseline") ? "[runtime_image]\nload = false\n" : "");
        } finally {
          System.setProperty("flatpull.root", own);
        }
        endpoint = Optional.empty();
        daemonEndpoint = Optional.empty();
      }
      default -> throw new IllegalArgumentException("unknown mode " + mode);
    }
    try {
      if (mode.endsWith("-booted")) {
        daemonAnswered = System.nanoTime();
      } else {
        d.awaitManager();
      }
      return new Node(ContainerdServer.withFlatpull(d.socket()), "flatpull", Optional.of(d), endpoint,
          daemonEndpoint, Optional.empty(), Optional.empty(), Optional.of(group));
    } catch (Exception e) {
      d.close();
      group.close();
      throw e;
    }
  }

  private static final java.util.concurrent.atomic.AtomicInteger GROUPS = new java.util.concurrent.atomic.AtomicInteger();

  /**
   * A memory group for a node's snapshotter processes, under the limit the documented set-up gives flatpull's two
   * processes together (the systemd unit's MemoryMax; {@link DocumentedSetUp}), the peer's daemon under the same.
   */
  private static MemoryCgroup newGroup() throws IOException {
    return MemoryCgroup.create("flatpull-bench-" + ProcessHandle.current().pid() + "-" + GROUPS.incrementAndGet(),
        DocumentedSetUp.memoryLimitBytes().orElse(Long.MAX_VALUE / 2));
  }

  private ColdStartResult measure(int run, String image, String linkName, Plan p) throws Exception {
    String ref = NEXT_VERSION.contains(p.mode())
        ? link.address() + "/" + nextRepository(image, p.mode()) + ":" + NEXT_TAGS.get(p.mode())
        : link.address() + "/bench/" + image + ":" + TAGS.get(p.format());
    String id = "bench-" + run + "-" + p.mode();
    try (Node node = node(p.mode())) {
      boolean warm = p.mode().startsWith("warm-");
      if (warm) {
        // The first start, untimed: the second finds the image and everything the first read on the node.
        pull(node, ref);
        create(node, image, ref, id);
        start(node, image, id);
        node.containerd().removeContainer(id);
      }
      boolean booted = p.mode().endsWith("-booted");
      // A manager still warming up serves no metrics yet; a fresh one's counters are all zero.
      Map<String, Double> before = booted ? Map.of() : metrics(node);
      Map<String, Double> daemonBefore = node.daemonMetrics().isEmpty() ? Map.of()
          : node.daemonMetrics().get().samples();
      Processes.dropCaches();
      node.resetPeaks();
      List<Long> pids = node.pids();
      Map<Long, Map.Entry<String, Long>> daemonCpu = ThreadCpu.snapshot(pids.get(0));
      Map<Long, Map.Entry<String, Long>> managerCpu = ThreadCpu.snapshot(pids.get(1));
      link.mark();
      if (booted) {
        Thread.sleep(Math.max(0, (daemonAnswered + 1_000_000_000L - System.nanoTime()) / 1_000_000));
      }
      long t0 = System.nanoTime();
      if (!warm) {
        pull(node, ref);
      }
      long t1 = System.nanoTime();
      create(node, image, ref, id);
      long t2 = System.nanoTime();
      start(node, image, id);
      long t3 = System.nanoTime();
      LinkEmulator.Counts counts = link.sinceMark();
      if (pids.get(0) > 0) {
        progress("  " + ThreadCpu.between(node.flatpull().isPresent() ? "daemon's" : "snapshotter's", daemonCpu,
            ThreadCpu.snapshot(pids.get(0)), 6));
      }
      if (pids.get(1) > 0) {
        progress("  " + ThreadCpu.between("FUSE manager's", managerCpu, ThreadCpu.snapshot(pids.get(1)), 8));
      }
      long daemonRss = node.daemonRss();
      long managerRss = node.managerRss();
      ColdStartResult.Peaks peaks = node.peaks();
      Map<String, Double> after = metrics(node);
      if (node.daemonMetrics().isPresent()) {
        Map<String, Double> daemonAfter = node.daemonMetrics().get().samples();
        progress("  " + SnapshotsCalls.between(daemonBefore, daemonAfter));
        progress("  " + GcPauses.between("daemon's", daemonBefore, daemonAfter));
      }
      if (node.managerMetrics().isPresent()) {
        progress("  " + GcPauses.between("FUSE manager's", before, after));
      }
      node.containerd().removeContainer(id);
      List<Long> firstMount = List.of();
      List<Long> laterMount = List.of();
      if (p.mode().equals("lazy")) {
        // The same layer mounted again on the same (no longer fresh) manager: what a node's later pulls cost.
        node.containerd().ctrOk("image", "rm", "--sync", ref);
        pull(node, ref);
        List<List<Long>> mounts = mountTimes(node.flatpull().orElseThrow());
        if (mounts.size() >= 2) {
          firstMount = mounts.get(0);
          laterMount = mounts.get(mounts.size() - 1);
        }
      }
      node.flatpull().ifPresent(d -> logTimeline(d));
      Map<String, Long> byKind = new LinkedHashMap<>();
      counts.requests().forEach(r -> byKind.merge(r.kind(), 1L, Long::sum));
      double hitRatio = -1;
      long fallbacks = -1;
      if (p.mode().startsWith("lazy") && node.flatpull().isPresent()) {
        // A layer flatpull could not serve lazily is pulled whole: its daemon says so once per layer.
        fallbacks = node.flatpull().get().log().lines().filter(l -> l.contains("is downloaded, not served lazily"))
            .count();
      }
      if (p.mode().startsWith("runtime-image") && node.managerMetrics().isPresent()) {
        double ri = delta(before, after, "flatpull_content_served_bytes_total{source=\"runtime_image\"}");
        double lazy = delta(before, after, "flatpull_content_served_bytes_total{source=\"lazy\"}");
        hitRatio = ri + lazy == 0 ? 0 : ri / (ri + lazy);
        fallbacks = Math.round(MetricsEndpoint.sum(after, "flatpull_runtime_image_rejected_total")
            - MetricsEndpoint.sum(before, "flatpull_runtime_image_rejected_total")
            + MetricsEndpoint.sum(after, "flatpull_runtime_image_lookups_total")
            - MetricsEndpoint.sum(before, "flatpull_runtime_image_lookups_total")
            - delta(before, after, "flatpull_runtime_image_lookups_total{result=\"loaded\"}")
            - delta(before, after, "flatpull_runtime_image_lookups_total{result=\"borrowed\"}"));
      }
      return new ColdStartResult(run, image, linkName, p.mode(), p.format(), (t1 - t0) / 1_000_000,
          (t2 - t1) / 1_000_000, (t3 - t2) / 1_000_000, (t3 - t0) / 1_000_000, counts.requests().size(),
          counts.bytesDown(), counts.connections(), byKind, daemonRss, managerRss, peaks, hitRatio, fallbacks, firstMount,
          laterMount, p.mode().startsWith("runtime-image") && node.flatpull().isPresent()
              ? streamLeft(node.flatpull().get(), image, (t2 - t1) / 1_000_000) : -1, "");
    } catch (IOException | RuntimeException e) {
      progress("  failed: " + e);
      return ColdStartResult.failed(run, image, linkName, p.mode(), p.format(), String.valueOf(e.getMessage()));
    }
  }

  private static double delta(Map<String, Double> before, Map<String, Double> after, String sample) {
    return after.getOrDefault(sample, 0.0) - before.getOrDefault(sample, 0.0);
  }

  private static Map<String, Double> metrics(Node node) throws IOException, InterruptedException {
    return node.managerMetrics().isEmpty() ? Map.of() : node.managerMetrics().get().samples();
  }

  private static void pull(Node node, String ref) throws IOException, InterruptedException {
    if (node.snapshotter().equals("overlayfs")) {
      node.containerd().ctrOk("image", "pull", "--plain-http", ref);
    } else {
      node.containerd().ctrOk("image", "rpull", "--plain-http", "--snapshotter", node.snapshotter(), ref);
    }
  }

  private static void create(Node node, String image, String ref, String id) throws IOException, InterruptedException {
    Workload.of(image).create(node.containerd(), node.snapshotter(), ref, id);
  }

  private static void start(Node node, String image, String id) throws IOException, InterruptedException {
    Workload.of(image).start(node.containerd(), id);
  }

  private static final java.util.regex.Pattern MOUNT_TIMES = java.util.regex.Pattern.compile(
      "(?:TOC fetched and verified|index read from its kept file) in (\\d+) ms, tree built in (\\d+) ms, mounted in (\\d+) ms");

  /**
   * The FUSE manager's TOC, tree and mount milliseconds of every layer it mounted, in order, from its log; not those
   * of its warm-up, whose synthetic image it mounts through its own service before it serves.
   */
  private static List<List<Long>> mountTimes(FlatpullDaemon d) throws IOException {
    List<List<Long>> out = new ArrayList<>();
    for (String line : d.log().lines().filter(l -> !l.contains("/flatpull/warm-up:")).toList()) {
      java.util.regex.Matcher m = MOUNT_TIMES.matcher(line);
      if (m.find()) {
        out.add(List.of(Long.parseLong(m.group(1)), Long.parseLong(m.group(2)), Long.parseLong(m.group(3))));
      }
    }
    return out;
  }

  private static final java.util.regex.Pattern STREAM_DONE = java.util.regex.Pattern.compile(
      "done (\\d+) ms after the image's first Prepare");
  private static final java.util.regex.Pattern MOUNTED_AFTER = java.util.regex.Pattern.compile(
      "mounted in \\d+ ms, (\\d+) ms after the image's first Prepare");

  /**
   * How long the runtime image's stream of {@code image} went on after the task started, from the manager's log (see
   * {@link ColdStartResult#streamLeftMillis}); -1 when the log does not say.
   */
  private static long streamLeft(FlatpullDaemon d, String image, long createMillis) throws IOException {
    long done = -1;
    long lastMount = -1;
    for (String line : d.log().lines().filter(l -> l.contains("/bench/" + image)).toList()) {
      java.util.regex.Matcher m = STREAM_DONE.matcher(line);
      if (m.find()) {
        done = Long.parseLong(m.group(1));
      }
      m = MOUNTED_AFTER.matcher(line);
      if (m.find()) {
        lastMount = Math.max(lastMount, Long.parseLong(m.group(1)));
      }
    }
    return done < 0 || lastMount < 0 ? -1 : Math.max(0, done - lastMount - createMillis);
  }

  /** Where the FUSE manager's part of the start went (TOC, tree, mount, runtime image), for the progress log. */
  private static void logTimeline(FlatpullDaemon d) {
    try {
      d.log().lines().filter(l -> l.contains("TOC fetched") || l.contains("Prepare received")
          || l.contains("runtime image ")).forEach(l -> progress("  " + l));
    } catch (IOException e) {
      progress("  no log: " + e);
    }
  }

  private static final long STARTED = System.nanoTime();

  /** A progress line on stderr, with the seconds since the benchmark started. */
  private static void progress(String line) {
    System.err.printf(Locale.ROOT, "[%6.1f s] %s%n", (System.nanoTime() - STARTED) / 1e9, line);
  }
}
