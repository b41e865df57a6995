package dev.flatpull.it.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.it.Cli;
import dev.flatpull.it.ContainerdServer;
import dev.flatpull.it.DebianImage;
import dev.flatpull.it.FlatpullDaemon;
import dev.flatpull.it.LinkEmulator;
import dev.flatpull.it.Processes;
import dev.flatpull.it.RegistryServer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Cold-start readiness through containerd over an emulated registry link ({@link LinkEmulator}), side by side in one
 * run: containerd's own full pull onto overlayfs, flatpull's lazy pull (default configuration, and with background
 * fetch off), and stargz-snapshotter 0.12 when its daemon binary is given. Each measurement is a true cold start:
 * fresh containerd and snapshotter state, fresh page cache, kernel caches dropped, the snapshotter's daemons already
 * running; timed from the pull's start to readiness. Repetition is the outer loop, so drift hits every mode alike.
 *
 * <pre>
 *   bin/benchmark-coldstart [--images python,http] [--link 20ms/200mbit]... [--runs 3]
 *                           [--modes overlayfs,lazy,lazy-nobg,runtime-image,runtime-image-landing,stargz]
 *                           [--stargz BINARY] [--out DIR]
 *                           [--baseline-root DIR]
 * </pre>
 *
 * Modes {@code runtime-image} and {@code runtime-image-landing} start from the service's runtime image (recorded and
 * pushed before anything is timed), without and with kernel landing.
 *
 * {@code --baseline-root} adds mode {@code lazy-baseline}: flatpull's default configuration run from the jar of another
 * built source tree (an earlier commit, say), so that a change is measured before and after in one run.
 *
 * <pre>
 * </pre>
 *
 * Images, built from Debian's packages once and cached: {@code python} (Debian + python3; ready when
 * {@code python3 -c "import json, http.server, email.parser, urllib.request, decimal, logging, argparse"} exits)
 * and {@code http} (Debian + nginx-light; ready at the first HTTP 200 on port 80). Both converted to eStargz by
 * {@code flatpull convert} (its default chunking), which stargz-snapshotter reads too.
 */
public final class ColdStartBenchmark {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final List<String> PYTHON = List.of("/usr/bin/python3", "-c",
      "import json, http.server, email.parser, urllib.request, decimal, logging, argparse");
  private static final List<String> NGINX = List.of("/usr/sbin/nginx", "-g", "daemon off;");

  /** A built source tree of another flatpull version (mode {@code lazy-baseline}), to compare with in one run. */
  private static String BASELINE_ROOT;

  private ColdStartBenchmark() {}

  /** One measured cold start. */
  record Result(int run, String image, String link, String mode, long pullMillis, long readyMillis,
      long requests, long bytesDown, long connections, Map<String, Long> byKind) {}

  public static void main(String[] args) throws Exception {
    List<String> images = List.of("python", "http");
    List<String> links = new ArrayList<>();
    List<String> modes = new ArrayList<>(List.of("overlayfs", "lazy", "lazy-nobg"));
    int runs = 3;
    Path stargz = null;
    Path out = Path.of("it-tests/target/coldstart");
    String baselineRoot = null;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--images" -> images = List.of(args[++i].split(","));
        case "--link" -> links.add(args[++i]);
        case "--runs" -> runs = Integer.parseInt(args[++i]);
        case "--modes" -> modes = new ArrayList<>(List.of(args[++i].split(",")));
        case "--stargz" -> stargz = Path.of(args[++i]);
        case "--out" -> out = Path.of(args[++i]);
        case "--baseline-root" -> baselineRoot = args[++i];
        default -> throw new IllegalArgumentException("unknown argument " + args[i]);
      }
    }
    if (baselineRoot != null && !modes.contains("lazy-baseline")) {
      modes.add(0, "lazy-baseline");
    }
    BASELINE_ROOT = baselineRoot;
    if (links.isEmpty()) {
      links.add("20ms/200mbit");
    }
    if (stargz != null && !modes.contains("stargz")) {
      modes.add("stargz");
    }
    if (stargz == null) {
      modes.remove("stargz");
    }
    Files.createDirectories(out);
    Processes.require("runc");
    List<Result> results = new ArrayList<>();
    try (RegistryServer registry = RegistryServer.start();
        LinkEmulator link = LinkEmulator.start(registry.address(), LinkEmulator.Link.parse(links.get(0)))) {
      Map<String, String> repos = new LinkedHashMap<>();
      for (String image : images) {
        Path rootfs = image.equals("python") ? DebianImage.pythonRootfs() : DebianImage.nginxRootfs();
        progress("pushing the " + image + " image and converting it to eStargz");
        ImageReference plain = DebianImage.pushRootfs(rootfs, registry.address(), "bench/" + image, "plain");
        Cli.Run c = Cli.inProcess("convert", "--plain-http", "--quiet", plain.toString(),
            plain.withTag("esgz").toString());
        if (c.exitCode() != 0) {
          throw new IOException("convert failed: " + c.stderr());
        }
        repos.put(image, "bench/" + image);
      }
      if (modes.stream().anyMatch(m -> m.startsWith("runtime-image"))) {
        // Recorded and pushed before anything is timed, as CI does per service version.
        link.setLink(LinkEmulator.Link.parse("1ms/10gbit"));
        for (String image : images) {
          progress("recording " + image + " and pushing its runtime image");
          recordRuntimeImage(image, link.address() + "/" + repos.get(image) + ":esgz");
        }
      }
      for (int run = 1; run <= runs; run++) {
        for (String l : links) {
          link.setLink(LinkEmulator.Link.parse(l));
          for (String image : images) {
            for (String mode : modes) {
              progress(String.format("run %d/%d, %s, %s, %s", run, runs, l, image, mode));
              Result r = measure(run, image, l, mode, link, link.address() + "/" + repos.get(image), stargz);
              progress(String.format(Locale.ROOT, "  ready after %.2f s (pull %.2f s), %d requests, %.1f MB",
                  r.readyMillis() / 1000.0, r.pullMillis() / 1000.0, r.requests(), r.bytesDown() / 1e6));
              results.add(r);
              Files.writeString(out.resolve("results.jsonl"), JSON.writeValueAsString(r) + "\n",
                  java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
            }
          }
        }
      }
      Files.writeString(out.resolve("requests.log"), link.logText());
    }
    String table = table(results, images, links, modes);
    Files.writeString(out.resolve("results.md"), table);
    System.out.print(table);
  }

  private static Result measure(int run, String image, String linkName, String mode, LinkEmulator link,
      String repo, Path stargz) throws Exception {
    String tag = mode.equals("overlayfs") ? "plain" : "esgz";
    String ref = repo + ":" + tag;
    String id = "bench-" + run + "-" + mode;
    List<AutoCloseable> cleanup = new ArrayList<>();
    Process stargzProcess = null;
    Path stargzRoot = null;
    try {
      ContainerdServer containerd;
      String snapshotter;
      switch (mode) {
        case "overlayfs" -> {
          containerd = ContainerdServer.start();
          snapshotter = "overlayfs";
        }
        case "runtime-image", "runtime-image-landing" -> {
          FlatpullDaemon d = FlatpullDaemon.start("", true, "[runtime_image]\nkernel_landing = "
              + mode.equals("runtime-image-landing") + "\n");
          cleanup.add(d);
          d.awaitManager();
          containerd = ContainerdServer.withFlatpull(d.socket());
          snapshotter = "flatpull";
        }
        case "lazy", "lazy-nobg", "lazy-baseline" -> {
          String own = System.getProperty("flatpull.root", "..");
          FlatpullDaemon d;
          try {
            if (mode.equals("lazy-baseline")) {
              // The daemon and its FUSE manager run from that tree's jar.
              System.setProperty("flatpull.root", BASELINE_ROOT);
            }
            // Lazy loading alone: a runtime image the registry may list for the image is not looked for.
            // (An earlier build may not know the setting: it has no runtime images to load anyway.)
            d = mode.equals("lazy-baseline") ? FlatpullDaemon.startWithDefaultFetching()
                : FlatpullDaemon.start(mode.equals("lazy-nobg") ? "background_fetch = false" : "", true,
                    "[runtime_image]\nload = false\n");
          } finally {
            System.setProperty("flatpull.root", own);
          }
          cleanup.add(d);
          d.awaitManager();
          containerd = ContainerdServer.withFlatpull(d.socket());
          snapshotter = "flatpull";
        }
        case "stargz" -> {
          stargzRoot = Files.createTempDirectory(Path.of("/var/tmp"), "stargz-");
          Path socket = stargzRoot.resolve("stargz.sock");
          stargzProcess = new ProcessBuilder(stargz.toString(), "--root", stargzRoot.resolve("root").toString(),
              "--address", socket.toString(), "--log-level", "warn").redirectErrorStream(true)
              .redirectOutput(stargzRoot.resolve("stargz.log").toFile()).start();
          for (int i = 0; i < 100 && !Files.exists(socket); i++) {
            Thread.sleep(100);
          }
          containerd = ContainerdServer.withProxySnapshotter("stargz", socket);
          snapshotter = "stargz";
        }
        default -> throw new IllegalArgumentException("unknown mode " + mode);
      }
      cleanup.add(0, containerd);
      Processes.dropCaches();
      link.mark();
      long t0 = System.nanoTime();
      if (snapshotter.equals("overlayfs")) {
        containerd.ctrOk("image", "pull", "--plain-http", ref);
      } else {
        containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", snapshotter, ref);
      }
      long t1 = System.nanoTime();
      if (image.equals("python")) {
        List<String> cmd = new ArrayList<>(List.of("run", "--rm", "--snapshotter", snapshotter, ref, id));
        cmd.addAll(PYTHON);
        containerd.ctrOk(cmd.toArray(String[]::new));
      } else {
        List<String> cmd = new ArrayList<>(List.of("run", "-d", "--net-host", "--snapshotter", snapshotter, ref, id));
        cmd.addAll(NGINX);
        containerd.ctrOk(cmd.toArray(String[]::new));
        Processes.awaitHttp200("http://127.0.0.1:80/", Duration.ofSeconds(120));
      }
      long t2 = System.nanoTime();
      LinkEmulator.Counts counts = link.sinceMark();
      if (image.equals("http")) {
        containerd.removeContainer(id);
      }
      for (AutoCloseable c : cleanup) {
        if (c instanceof FlatpullDaemon d) {
          // Where the FUSE manager's part of the pull went (TOC, tree, mount), for the progress log.
          d.log().lines().filter(l -> l.contains("TOC fetched") || l.contains("Prepare received")
              || l.contains("runtime image ")).forEach(l -> progress("  " + l));
        }
      }
      Map<String, Long> byKind = new LinkedHashMap<>();
      counts.requests().forEach(r -> byKind.merge(r.kind(), 1L, Long::sum));
      return new Result(run, image, linkName, mode, (t1 - t0) / 1_000_000, (t2 - t0) / 1_000_000,
          counts.requests().size(), counts.bytesDown(), counts.connections(), byKind);
    } finally {
      for (AutoCloseable c : cleanup) {
        try {
          c.close();
        } catch (Exception e) {
          progress("  cleanup: " + e);
        }
      }
      if (stargzProcess != null) {
        stargzProcess.destroy();
        stargzProcess.waitFor();
        for (String m : Files.readAllLines(Path.of("/proc/self/mounts"))) {
          String target = m.split(" ")[1];
          if (target.startsWith(stargzRoot.toString())) {
            Processes.run(List.of("umount", "-l", target), 10);
          }
        }
        Processes.deleteTree(stargzRoot);
      }
    }
  }

  /** Records the image's service (as the benchmark starts it) on a node of its own, and pushes its runtime image. */
  private static void recordRuntimeImage(String image, String ref) throws Exception {
    try (FlatpullDaemon d = FlatpullDaemon.start("");
        ContainerdServer c = ContainerdServer.withFlatpull(d.socket())) {
      List<String> args = new ArrayList<>(List.of("record", "--config", d.config().toString(), "--plain-http",
          "--containerd-address", c.socket().toString(), "--namespace", ContainerdServer.NAMESPACE,
          "--out", Files.createTempFile("bench", ".fptrace").toString(), "--push-runtime-image", "--probe",
          image.equals("python") ? "exit" : "http://127.0.0.1:80/", ref, "--"));
      args.addAll(image.equals("python") ? PYTHON : NGINX);
      Cli.Run r = Cli.inProcess(args.toArray(String[]::new));
      if (r.exitCode() != 0) {
        throw new IOException("recording " + image + " failed: " + r.stderr());
      }
    }
  }

  private static void progress(String line) {
    System.err.println(line);
  }

  private static String table(List<Result> results, List<String> images, List<String> links, List<String> modes) {
    StringBuilder b = new StringBuilder();
    b.append("| image | link | mode | time to ready, median (min-max) | pull phase, median | vs overlayfs |")
        .append(modes.contains("stargz") ? " vs stargz |" : "")
        .append(" requests before ready | MB before ready |\n");
    b.append("|---|---|---|---|---|---|").append(modes.contains("stargz") ? "---|" : "").append("---|---|\n");
    for (String image : images) {
      for (String link : links) {
        Map<String, Long> median = new LinkedHashMap<>();
        for (String mode : modes) {
          median.put(mode, median(select(results, image, link, mode).stream().map(Result::readyMillis).toList()));
        }
        for (String mode : modes) {
          List<Result> rs = select(results, image, link, mode);
          if (rs.isEmpty()) {
            continue;
          }
          long ready = median.get(mode);
          long min = rs.stream().mapToLong(Result::readyMillis).min().orElse(0);
          long max = rs.stream().mapToLong(Result::readyMillis).max().orElse(0);
          b.append(String.format(Locale.ROOT, "| %s | %s | %s | %.2f s (%.2f-%.2f) | %.2f s | %s |", image, link,
              mode, ready / 1000.0, min / 1000.0, max / 1000.0,
              median(rs.stream().map(Result::pullMillis).toList()) / 1000.0,
              ratio(median.get("overlayfs"), ready)));
          if (modes.contains("stargz")) {
            b.append(" " + ratio(median.get("stargz"), ready) + " |");
          }
          b.append(String.format(Locale.ROOT, " %d | %.1f |%n",
              median(rs.stream().map(Result::requests).toList()),
              median(rs.stream().map(Result::bytesDown).toList()) / 1e6));
        }
      }
    }
    return b.toString();
  }

  /** How many times faster than {@code baseline} a median of {@code millis} is; "-" when not measured. */
  private static String ratio(Long baseline, long millis) {
    return baseline == null || baseline == 0 || millis == 0 ? "-"
        : String.format(Locale.ROOT, "%.2fx", baseline / (double) millis);
  }

  private static List<Result> select(List<Result> results, String image, String link, String mode) {
    return results.stream().filter(r -> r.image().equals(image) && r.link().equals(link) && r.mode().equals(mode))
        .toList();
  }

  private static long median(List<Long> values) {
    if (values.isEmpty()) {
      return 0;
    }
    List<Long> sorted = new ArrayList<>(values);
    sorted.sort(null);
    return sorted.get(sorted.size() / 2);
  }
}
