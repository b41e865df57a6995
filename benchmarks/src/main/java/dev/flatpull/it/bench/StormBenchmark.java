package dev.flatpull.it.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.it.ContainerdServer;
import dev.flatpull.it.DebianImage;
import dev.flatpull.it.FlatpullDaemon;
import dev.flatpull.it.LinkEmulator;
import dev.flatpull.it.Processes;
import dev.flatpull.it.RegistryServer;
import dev.flatpull.it.SliceCache;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * A cold-start storm simulated on one host: N nodes (each a flatpull daemon and FUSE manager, and a containerd, with
 * roots, sockets and page caches of their own) cold-start the same service at the same instant. Between them and the
 * origin registry sits one shared cache, as their {@code hosts.toml} mirror, the origin being the server after it:
 *
 * <ul>
 *   <li>{@code direct}: no cache (what N nodes cost the origin without one);
 *   <li>{@code pull-through}: the distribution registry in proxy mode, started cold for each storm (it fetches whole
 *       blobs from the origin and answers ranges only once it holds a blob);
 *   <li>{@code range-cache}: nginx with the slice module and proxy_cache ({@link SliceCache}), started cold.
 * </ul>
 *
 * The origin is reached over an emulated WAN link ({@code --link}), one per client (the cache's upstream and each
 * node's direct path: a simulation of one host does not contend them); the cache over an emulated LAN link per node
 * ({@code --lan}). Every link counts what crossed it. Reported per node: time to ready, bytes and requests from the
 * cache and from the origin; per storm: what the origin sent in all, against the working set (what one node moves in
 * a lazy cold start straight from the origin) and the compressed image.
 *
 * <pre>
 *   bin/benchmark-storm [--nodes 1,2,4] [--caches direct,pull-through,range-cache] [--modes lazy,runtime-image]
 *                       [--link 20ms/200mbit] [--lan 1ms/1gbit] [--out DIR]
 * </pre>
 *
 * Writes {@code storm.jsonl} (a line per node per storm) and {@code storm.md} under {@code --out}.
 */
public final class StormBenchmark {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String IMAGE = "python";
  private static final long STARTED = System.nanoTime();

  /** One node's start in a storm. */
  record NodeResult(String mode, String cache, int nodes, int node, long pullMillis, long readyMillis,
      long cacheBytes, int cacheRequests, long originBytes, int originRequests, String error) {}

  /** One storm: its nodes and what the origin sent in all (the cache's upstream and the nodes' direct reads). */
  record Storm(String mode, String cache, int nodes, List<NodeResult> results, long originBytes, int originRequests,
      long cacheUpstreamBytes) {}

  private final RegistryServer origin;
  private final String reference;
  private final LinkEmulator.Link wan;
  private final LinkEmulator.Link lan;
  private final List<String> layers;

  private StormBenchmark(RegistryServer origin, String reference, List<String> layers, LinkEmulator.Link wan,
      LinkEmulator.Link lan) {
    this.origin = origin;
    this.layers = List.copyOf(layers);
    this.reference = reference;
    this.wan = wan;
    this.lan = lan;
  }

  public static void main(String[] args) throws Exception {
    List<Integer> nodes = List.of(1, 2, 4);
    List<String> caches = new ArrayList<>(List.of("direct", "pull-through", "range-cache"));
    List<String> modes = List.of("lazy", "runtime-image");
    String link = "20ms/200mbit";
    String lanLink = "1ms/1gbit";
    Path out = Path.of("benchmarks/target/storm");
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--nodes" -> nodes = List.of(args[++i].split(",")).stream().map(Integer::parseInt).toList();
        case "--caches" -> caches = new ArrayList<>(List.of(args[++i].split(",")));
        case "--modes" -> modes = List.of(args[++i].split(","));
        case "--link" -> link = args[++i];
        case "--lan" -> lanLink = args[++i];
        case "--out" -> out = Path.of(args[++i]);
        default -> throw new IllegalArgumentException("unknown argument " + args[i]);
      }
    }
    Processes.require("runc");
    if (caches.contains("range-cache") && !onPath("nginx")) {
      progress("no nginx: the range-cache shape is left out (Debian: apt-get install nginx)");
      caches.remove("range-cache");
    }
    Files.createDirectories(out);
    Files.deleteIfExists(out.resolve("storm.jsonl"));
    List<Storm> storms = new ArrayList<>();
    long imageBytes;
    try (RegistryServer origin = RegistryServer.start()) {
      progress("pushing the python image and converting it to eStargz");
      String ref = DebianImage.pushPythonEstargz(origin.address(), "bench/python");
      imageBytes = ColdStartBenchmark.compressedBytes(ref);
      if (modes.contains("runtime-image")) {
        progress("recording the service and pushing its runtime image (untimed)");
        Workload.of(IMAGE).recordRuntimeImage(ref);
      }
      StormBenchmark bench = new StormBenchmark(origin, ref, layerDigests(ref), LinkEmulator.Link.parse(link),
          LinkEmulator.Link.parse(lanLink));
      for (String mode : modes) {
        for (String cache : caches) {
          for (int n : nodes) {
            progress(String.format("storm: %s, %s, %d node%s", mode, cache, n, n == 1 ? "" : "s"));
            for (Storm s : bench.storms(mode, cache, n)) {
            storms.add(s);
            progress("  " + s.cache());
            for (NodeResult r : s.results()) {
              progress(r.error().isEmpty() ? String.format(Locale.ROOT,
                  "  node %d ready after %.2f s (pull %.2f); from the cache %.1f MB in %d requests, from the origin"
                      + " %.1f MB in %d", r.node(), r.readyMillis() / 1000.0, r.pullMillis() / 1000.0,
                  r.cacheBytes() / 1e6, r.cacheRequests(), r.originBytes() / 1e6, r.originRequests())
                  : "  node " + r.node() + " NOT READY: " + r.error());
              Files.writeString(out.resolve("storm.jsonl"), JSON.writeValueAsString(r) + "\n",
                  StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            }
            progress(String.format(Locale.ROOT, "  origin sent %.1f MB in %d requests (the cache's upstream %.1f MB)",
                s.originBytes() / 1e6, s.originRequests(), s.cacheUpstreamBytes() / 1e6));
            }
          }
        }
      }
    }
    String table = markdown(storms, imageBytes, link, lanLink);
    Files.writeString(out.resolve("storm.md"), table);
    System.out.print(table);
    progress("results in " + out.toAbsolutePath() + ": storm.jsonl, storm.md");
    if (storms.stream().flatMap(s -> s.results().stream()).anyMatch(r -> !r.error().isEmpty())) {
      progress("FAILED: a node did not reach readiness");
      System.exit(1);
    }
  }

  /** A node of the storm and the links it counts its traffic on. */
  private record Node(FlatpullDaemon flatpull, ContainerdServer containerd, Path hosts, LinkEmulator toOrigin,
      LinkEmulator toCache) implements AutoCloseable {
    @Override
    public void close() throws Exception {
      try {
        containerd.close();
      } finally {
        try {
          flatpull.close();
        } finally {
          toOrigin.close();
          if (toCache != null) {
            toCache.close();
          }
          Processes.deleteTree(hosts);
        }
      }
    }
  }

  /**
   * A storm on a cold cache, and for a cache a second one with new nodes once the cache holds what the first moved
   * (the pull-through cache: the image's blobs; the slice cache: the slices the first storm read).
   */
  private List<Storm> storms(String mode, String cacheKind, int n) throws Exception {
    List<AutoCloseable> opened = new ArrayList<>();
    try {
      LinkEmulator upstream = null;
      String cacheAddress = null;
      if (!cacheKind.equals("direct")) {
        upstream = LinkEmulator.start(origin.address(), wan);
        opened.add(upstream);
        if (cacheKind.equals("pull-through")) {
          RegistryServer cache = RegistryServer.startPullThrough("http://" + upstream.address());
          opened.add(cache);
          cacheAddress = cache.address();
        } else {
          SliceCache cache = SliceCache.start(upstream.address());
          opened.add(cache);
          cacheAddress = cache.address();
        }
      }
      List<Storm> out = new ArrayList<>();
      out.add(storm(mode, cacheKind + (upstream == null ? "" : ", cold"), n, upstream, cacheAddress));
      if (upstream != null) {
        if (cacheKind.equals("pull-through")) {
          awaitStored(cacheAddress);
        }
        out.add(storm(mode, cacheKind + ", warm", n, upstream, cacheAddress));
      }
      return out;
    } finally {
      closeAll(opened);
    }
  }

  private Storm storm(String mode, String cacheKind, int n, LinkEmulator upstream, String cacheAddress)
      throws Exception {
    List<AutoCloseable> opened = new ArrayList<>();
    try {
      List<Node> nodes = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        nodes.add(node(mode, cacheAddress));
        opened.add(nodes.get(i));
      }
      Processes.dropCaches();
      if (upstream != null) {
        upstream.mark();
      }
      for (Node node : nodes) {
        node.toOrigin().mark();
        if (node.toCache() != null) {
          node.toCache().mark();
        }
      }
      CyclicBarrier together = new CyclicBarrier(n);
      ExecutorService threads = Executors.newFixedThreadPool(n);
      List<Future<NodeResult>> futures = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        int index = i;
        futures.add(threads.submit(() -> start(mode, cacheKind, n, index, nodes.get(index), together)));
      }
      List<NodeResult> results = new ArrayList<>();
      for (Future<NodeResult> f : futures) {
        results.add(f.get());
      }
      threads.shutdown();
      long originBytes = results.stream().mapToLong(NodeResult::originBytes).sum();
      int originRequests = results.stream().mapToInt(NodeResult::originRequests).sum();
      long upstreamBytes = 0;
      if (upstream != null) {
        LinkEmulator.Counts c = upstream.sinceMark();
        upstreamBytes = c.bytesDown();
        originBytes += c.bytesDown();
        originRequests += c.requests().size();
      }
      return new Storm(mode, cacheKind, n, results, originBytes, originRequests, upstreamBytes);
    } finally {
      closeAll(opened);
    }
  }

  private static void closeAll(List<AutoCloseable> opened) {
    for (int i = opened.size() - 1; i >= 0; i--) {
      try {
        opened.get(i).close();
      } catch (Exception e) {
        progress("  closing: " + e);
      }
    }
  }

  /** Waits until the pull-through cache answers ranges of every layer: it holds them. */
  private void awaitStored(String cacheAddress) throws Exception {
    long deadline = System.nanoTime() + 180_000_000_000L;
    String repository = reference.substring(reference.indexOf('/') + 1, reference.lastIndexOf(':'));
    for (String digest : layers) {
      java.net.URI uri = java.net.URI.create("http://" + cacheAddress + "/v2/" + repository + "/blobs/" + digest);
      while (true) {
        java.net.HttpURLConnection c = (java.net.HttpURLConnection) uri.toURL().openConnection();
        c.setRequestProperty("Range", "bytes=0-0");
        int status = c.getResponseCode();
        c.disconnect();
        if (status == 206) {
          break;
        }
        if (System.nanoTime() > deadline) {
          throw new IOException("the pull-through cache did not store " + digest + " within 180 s");
        }
        Thread.sleep(250);
      }
    }
  }

  /** A node whose hosts.toml lists the cache (when there is one) as mirror before the origin. */
  private Node node(String mode, String cacheAddress) throws Exception {
    LinkEmulator toOrigin = LinkEmulator.start(origin.address(), wan);
    LinkEmulator toCache = cacheAddress == null ? null : LinkEmulator.start(cacheAddress, lan);
    Path hosts = Files.createTempDirectory("flatpull-storm-hosts");
    Path dir = Files.createDirectories(hosts.resolve(origin.address()));
    Files.writeString(dir.resolve("hosts.toml"), "server = \"http://" + toOrigin.address() + "\"\n"
        + (toCache == null ? "" : "\n[host.\"http://" + toCache.address() + "\"]\n  capabilities = [\"pull\", \"resolve\"]\n"));
    FlatpullDaemon d = FlatpullDaemon.start("", true, mode.equals("lazy") ? "[runtime_image]\nload = false\n" : "",
        "config_path = \"" + hosts + "\"\n");
    try {
      d.awaitManager();
      return new Node(d, ContainerdServer.withFlatpull(d.socket()), hosts, toOrigin, toCache);
    } catch (Exception e) {
      d.close();
      throw e;
    }
  }

  private NodeResult start(String mode, String cacheKind, int n, int index, Node node, CyclicBarrier together) {
    String id = "storm-" + index;
    try {
      together.await();
      long t0 = System.nanoTime();
      node.containerd().ctrOk("image", "rpull", "--hosts-dir", node.hosts().toString(), "--snapshotter", "flatpull",
          reference);
      long t1 = System.nanoTime();
      Workload.of(IMAGE).create(node.containerd(), "flatpull", reference, id);
      Workload.of(IMAGE).start(node.containerd(), id);
      long t2 = System.nanoTime();
      LinkEmulator.Counts origin = node.toOrigin().sinceMark();
      LinkEmulator.Counts cache = node.toCache() == null ? null : node.toCache().sinceMark();
      node.containerd().removeContainer(id);
      return new NodeResult(mode, cacheKind, n, index + 1, (t1 - t0) / 1_000_000, (t2 - t0) / 1_000_000,
          cache == null ? 0 : cache.bytesDown(), cache == null ? 0 : cache.requests().size(), origin.bytesDown(),
          origin.requests().size(), "");
    } catch (Exception e) {
      return new NodeResult(mode, cacheKind, n, index + 1, -1, -1, 0, 0, 0, 0, String.valueOf(e.getMessage()));
    }
  }

  static String markdown(List<Storm> storms, long imageBytes, String link, String lan) {
    StringBuilder b = new StringBuilder();
    b.append(String.format(Locale.ROOT, "Cold-start storm: python image (%.1f MB compressed), origin over %s, cache"
        + " over %s%n%n", imageBytes / 1e6, link, lan));
    b.append("| mode | cache | nodes | time to ready per node (s) | MB from the cache per node | MB from the origin"
        + " in all | origin requests | origin / working set | origin / image |\n");
    b.append("|---|---|---|---|---|---|---|---|---|\n");
    for (Storm s : storms) {
      double workingSet = workingSet(storms, s.mode());
      b.append(String.format(Locale.ROOT, "| %s | %s | %d | %s | %s | %.1f | %d | %s | %.2f |%n", s.mode(), s.cache(),
          s.nodes(), join(s.results().stream().map(r -> r.readyMillis() < 0 ? "failed"
              : String.format(Locale.ROOT, "%.2f", r.readyMillis() / 1000.0)).toList()),
          s.cache().startsWith("direct") ? "-" : join(s.results().stream()
              .map(r -> String.format(Locale.ROOT, "%.1f", r.cacheBytes() / 1e6)).toList()),
          s.originBytes() / 1e6, s.originRequests(),
          workingSet > 0 ? String.format(Locale.ROOT, "%.2f", s.originBytes() / workingSet) : "-",
          (double) s.originBytes() / imageBytes));
    }
    b.append("\nWorking set: what one node moved from the origin in the same mode with no cache (direct, 1 node). A"
        + " cold cache starts empty; a warm one holds what the cold storm before it moved (the pull-through cache: the"
        + " whole image, which it fetched; the slice cache: the slices that storm read), and its storm has new"
        + " nodes.\n");
    return b.toString();
  }

  private static double workingSet(List<Storm> storms, String mode) {
    return storms.stream().filter(s -> s.mode().equals(mode) && s.cache().equals("direct") && s.nodes() == 1)
        .mapToDouble(s -> s.originBytes()).findFirst().orElse(-1);
  }

  private static String join(List<String> parts) {
    return String.join(", ", parts);
  }

  private static List<String> layerDigests(String ref) throws IOException {
    dev.flatpull.it.Cli.Run r = dev.flatpull.it.Cli.inProcess("inspect", "--plain-http", "--json", ref);
    if (r.exitCode() != 0) {
      throw new IOException("inspect " + ref + " failed: " + r.stderr());
    }
    List<String> out = new ArrayList<>();
    new ObjectMapper().readTree(r.stdout()).path("layers").forEach(l -> out.add(l.path("digest").asText()));
    return out;
  }

  private static boolean onPath(String program) {
    for (String dir : System.getenv().getOrDefault("PATH", "/usr/sbin:/usr/bin").split(":")) {
      if (Files.isExecutable(Path.of(dir, program))) {
        return true;
      }
    }
    return false;
  }

  private static void progress(String line) {
    System.err.printf(Locale.ROOT, "[%6.1f s] %s%n", (System.nanoTime() - STARTED) / 1e9, line);
  }
}
