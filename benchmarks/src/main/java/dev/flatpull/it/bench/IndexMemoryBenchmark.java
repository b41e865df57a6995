package dev.flatpull.it.bench;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.it.Cli;
import dev.flatpull.it.ImagePusher;
import dev.flatpull.it.Processes;
import dev.flatpull.it.RegistryServer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.zip.GZIPOutputStream;

/**
 * What a layer's index costs per entry, on a generated eStargz layer of {@code --entries} (default 1,000,000) entries:
 * 1 % directories, the rest small regular files of realistic path length, each with a chunk digest of its own, all
 * pointing at one shared gzip member (identical stored ranges are legal). Prints the heap the verified index retains and the heap
 * the mount's tree adds, in bytes per entry (after a full GC, in this JVM), then pushes the layer to a local registry
 * process and prints the peak RSS of {@code flatpull inspect} and the RSS of {@code flatpull mount --layer} once
 * mounted, both run with the launcher's default JVM options unless {@code FLATPULL_JAVA_OPTS} says otherwise.
 */
public final class IndexMemoryBenchmark {
  private IndexMemoryBenchmark() {}

  /** The blob and its descriptor. */
  record Layer(byte[] blob, Descriptor descriptor, int entries, int tocBytes) {}

  static Layer generate(int entries) throws IOException {
    byte[] content = "hello\n".getBytes(StandardCharsets.US_ASCII);
    ByteArrayOutputStream blob = new ByteArrayOutputStream();
    try (GZIPOutputStream gz = new GZIPOutputStream(blob)) {
      gz.write(content);
    }
    long dataEnd = blob.size();
    int dirs = Math.max(1, entries / 100);
    StringBuilder json = new StringBuilder(entries * 140).append("{\"version\":1,\"entries\":[");
    int written = 0;
    for (int d = 0; d < dirs && written < entries; d++) {
      String dir = String.format(Locale.ROOT, "usr/lib/python3/dist-packages/pkg%05d", d);
      json.append(written == 0 ? "" : ",").append("{\"name\":\"").append(dir)
          .append("/\",\"type\":\"dir\",\"mode\":493,\"modtime\":\"2024-05-01T10:00:00Z\"}");
      written++;
      for (int f = 0; f < entries / dirs - 1 && written < entries; f++) {
        String name = dir + String.format(Locale.ROOT, "/module_%05d.py", f);
        // A digest of its own per file, as in real layers (one shared digest would flatter the index); these files
        // are never read, so their content need not match it.
        json.append(",{\"name\":\"").append(name)
            .append("\",\"type\":\"reg\",\"size\":").append(content.length)
            .append(",\"mode\":420,\"modtime\":\"2024-05-01T10:00:00Z\",\"offset\":0,\"chunkDigest\":\"")
            .append(Digest.sha256(name.getBytes(StandardCharsets.UTF_8))).append("\"}");
        written++;
      }
    }
    while (written < entries) {
      json.append(",{\"name\":\"extra").append(written).append("\",\"type\":\"dir\"}");
      written++;
    }
    byte[] toc = json.append("]}").toString().getBytes(StandardCharsets.UTF_8);
    ByteArrayOutputStream tar = new ByteArrayOutputStream(toc.length + 2048);
    TarWriter.writeEntry(tar, TarHeader.regular(EstargzToc.TOC_NAME, toc.length, 0644, java.time.Instant.EPOCH), toc);
    TarWriter.writeEnd(tar);
    try (GZIPOutputStream gz = new GZIPOutputStream(blob)) {
      gz.write(tar.toByteArray());
    }
    blob.write(EstargzToc.footer(dataEnd));
    byte[] b = blob.toByteArray();
    return new Layer(b, new Descriptor(MediaTypes.OCI_LAYER_GZIP, Digest.sha256(b), b.length,
        Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, Digest.sha256(toc).toString())), written, toc.length);
  }

  private static long usedAfterGc() {
    for (int i = 0; i < 3; i++) {
      System.gc();
    }
    return ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed();
  }

  public static void main(String[] args) throws Exception {
    int entries = 1_000_000;
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--entries")) {
        entries = Integer.parseInt(args[++i]);
      }
    }
    Layer layer = generate(entries);
    System.out.printf(Locale.ROOT, "layer: %,d entries, TOC %.1f MiB of JSON, blob %.1f MiB%n", layer.entries(),
        layer.tocBytes() / 1048576.0, layer.blob().length / 1048576.0);
    FetchLimits limits = FetchLimits.DEFAULTS;
    byte[] blob = layer.blob();
    // Parse time: the best of three reads, for comparison between versions (not a benchmark of its own: see
    // TocParseBenchmark).
    long bestNanos = Long.MAX_VALUE;
    for (int i = 0; i < 3; i++) {
      long t0 = System.nanoTime();
      EstargzToc.read(layer.descriptor(), r -> Arrays.copyOfRange(blob, (int) r.offset(), (int) r.end()), limits);
      bestNanos = Math.min(bestNanos, System.nanoTime() - t0);
    }
    System.out.printf(Locale.ROOT, "TOC fetched from memory, verified and parsed in %.2f s (best of 3)%n",
        bestNanos / 1e9);
    long before = usedAfterGc();
    LayerIndex index = EstargzToc.read(layer.descriptor(),
        r -> Arrays.copyOfRange(blob, (int) r.offset(), (int) r.end()), limits);
    long withIndex = usedAfterGc();
    LayerTree tree = LayerTree.of(index);
    long withTree = usedAfterGc();
    double indexPerEntry = (withIndex - before) / (double) index.entries().size();
    double treePerEntry = (withTree - withIndex) / (double) tree.size();
    System.out.printf(Locale.ROOT, "heap retained: index %.0f B/entry, the mount's tree %.0f B/entry more, together"
        + " %.0f B/entry (%.0f MiB for %,d entries)%n", indexPerEntry, treePerEntry, indexPerEntry + treePerEntry,
        (withTree - before) / 1048576.0, index.entries().size());
    java.lang.ref.Reference.reachabilityFence(tree);
    index = null;
    tree = null;

    try (RegistryServer registry = RegistryServer.start()) {
      String ref = registry.address() + "/bench/index-memory:" + entries;
      ImagePusher.pushBlobs(ImageReference.parse(ref),
          List.of(new ImagePusher.Blob(blob, layer.descriptor(), Digest.sha256(blob))));
      Path work = Files.createTempDirectory(Path.of("/var/tmp"), "fp-index-memory-");
      Path config = work.resolve("config.toml");
      Files.writeString(config, "root = \"" + work.resolve("root") + "\"\n[registry]\nplain_http = true\n");
      try {
        Path launcher = Path.of(System.getProperty("flatpull.root", ".")).toAbsolutePath().resolve("bin/flatpull");
        long inspectPeak = peakRss(new ProcessBuilder(launcher.toString(), "inspect", "--config", config.toString(),
            ref).redirectErrorStream(true).redirectOutput(work.resolve("inspect.log").toFile()).start());
        Path mnt = work.resolve("mnt");
        List<String> mountArgs = List.of(launcher.toString(), "mount", "--config", config.toString(), "--layer",
            layer.descriptor().digest().hex().substring(0, 12), "--no-background-fetch", "--no-runtime-image", ref,
            mnt.toString());
        Mounted first = mountOnce(mountArgs, work.resolve("mount.log"), work.resolve("root"));
        System.out.printf(Locale.ROOT, "flatpull inspect: peak RSS %.0f MiB (%.0f B/entry); flatpull mount --layer,"
                + " once mounted: RSS %.0f MiB (%.0f B/entry), peak %.0f MiB; launcher JVM options: %s%n",
            inspectPeak / 1048576.0, inspectPeak / (double) entries, first.rss() / 1048576.0,
            first.rss() / (double) entries, first.peak() / 1048576.0,
            System.getenv().getOrDefault("FLATPULL_JAVA_OPTS", "(defaults)"));
        System.out.println("first mount (TOC fetched and parsed): " + first.timing());
        Optional<Path> kept = keptIndex(work.resolve("root"));
        if (kept.isEmpty()) {
          throw new IOException("the first mount kept no index file under " + work.resolve("root"));
        }
        System.out.printf(Locale.ROOT, "index file: %.1f MiB (%.0f B/entry)%n", Files.size(kept.get()) / 1048576.0,
            Files.size(kept.get()) / (double) entries);
        Mounted second = mountOnce(mountArgs, work.resolve("mount-again.log"), null);
        System.out.printf(Locale.ROOT, "second mount (index file present): RSS once mounted %.0f MiB, peak %.0f MiB;"
            + " %s%n", second.rss() / 1048576.0, second.peak() / 1048576.0, second.timing());
        System.out.println("inspect: " + Files.readString(work.resolve("inspect.log")).lines()
            .filter(l -> l.startsWith("1 ") || l.startsWith("0 ")).findFirst().orElse("?"));
      } finally {
        dev.flatpull.snapshotter.overlay.HostMounts.detachAllUnder(work);
        Processes.deleteTree(work);
      }
    }
  }

  /** One run of {@code flatpull mount}: its RSS once mounted, its peak RSS, and its log's timing line. */
  record Mounted(long rss, long peak, String timing) {}

  /**
   * Runs {@code flatpull mount} until its log says "mounted", polling its peak RSS (VmHWM, mapped pages included);
   * then, with {@code keepUnder}, waits until the mount has kept its layer's index file there, and stops it.
   */
  private static Mounted mountOnce(List<String> args, Path log, Path keepUnder) throws Exception {
    Process p = new ProcessBuilder(args).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    try {
      Path status = Path.of("/proc/" + p.pid() + "/status");
      long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(10);
      while (p.isAlive() && System.nanoTime() < deadline && !Cli.mountSaysMounted(Files.readString(log))) {
        Thread.sleep(20);
      }
      if (!Cli.mountSaysMounted(Files.readString(log))) {
        throw new IOException("the mount did not come up: " + Files.readString(log));
      }
      Thread.sleep(2000); // settle: what stays resident while serving
      long rss = kib(status, "VmRSS:") * 1024;
      while (keepUnder != null && keptIndex(keepUnder).isEmpty() && p.isAlive() && System.nanoTime() < deadline) {
        Thread.sleep(100);
      }
      long peak = kib(status, "VmHWM:") * 1024;
      String timing = Files.readString(log).lines().filter(l -> l.contains("tree built in")).findFirst()
          .map(l -> l.substring(l.indexOf("): ") + 3)).orElse("(no timing line)");
      return new Mounted(rss, peak, timing);
    } finally {
      p.destroy();
      p.waitFor(60, TimeUnit.SECONDS);
    }
  }

  /** The layer index file a mount kept under the root {@code root}, once it is complete (renamed into place). */
  private static Optional<Path> keptIndex(Path root) throws IOException {
    Path named = root.resolve("cache").resolve("named");
    if (!Files.isDirectory(named)) {
      return Optional.empty();
    }
    try (var files = Files.list(named)) {
      return files.filter(f -> f.getFileName().toString().startsWith("layer-index-")).findFirst();
    }
  }

  /** Polls a process's peak RSS (VmHWM) until it exits. */
  private static long peakRss(Process p) throws Exception {
    long peak = 0;
    Path status = Path.of("/proc/" + p.pid() + "/status");
    long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(10);
    while (p.isAlive() && System.nanoTime() < deadline) {
      peak = Math.max(peak, Math.max(kib(status, "VmRSS:"), kib(status, "VmHWM:")));
      Thread.sleep(20);
    }
    return peak * 1024;
  }

  private static long kib(Path status, String key) {
    try {
      for (String l : Files.readAllLines(status)) {
        if (l.startsWith(key)) {
          return Long.parseLong(l.substring(key.length()).trim().split("\\s+")[0]);
        }
      }
    } catch (IOException | NumberFormatException gone) {
      // The process exited between the check and the read.
    }
    return 0;
  }
}
