package dev.flatpull.it.bench;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.convert.ImageConverter;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.RequestKind;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.it.Cli;
import dev.flatpull.it.ContainerdServer;
import dev.flatpull.it.DebianImage;
import dev.flatpull.it.FlatpullDaemon;
import dev.flatpull.it.Processes;
import dev.flatpull.it.RegistryServer;
import dev.flatpull.runtimeimage.RuntimeImageBuilder;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import dev.flatpull.trace.TraceFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * The measurement behind {@code flatpull convert}'s default chunk size: the Debian + python3 image converted to eStargz
 * at each candidate chunk size, and for each, from one recorded trace of a Python start-up (a real cold start through
 * containerd and flatpull): the compressed image, its TOC, the runtime image in both verification modes, and what a
 * lazy loader without a runtime image would request to read the traced pages (no readahead). Run with
 * {@code bin/benchmark-chunk-size [SIZES...]}; needs root, FUSE, containerd, runc, docker-registry.
 */
public final class ChunkSizeBenchmark {
  private ChunkSizeBenchmark() {}

  public static void main(String[] args) throws Exception {
    List<Long> sizes = new ArrayList<>();
    for (String a : args) {
      sizes.add(Long.parseLong(a.replace("K", "")) * (a.endsWith("K") ? 1024 : 1));
    }
    if (sizes.isEmpty()) {
      sizes = List.of(16L << 10, 32L << 10, 64L << 10, 256L << 10, 1L << 20, 4L << 20);
    }
    Path work = Files.createTempDirectory("flatpull-chunk-bench");
    try (RegistryServer registry = RegistryServer.start();
        FlatpullDaemon flatpull = FlatpullDaemon.start("");
        ContainerdServer containerd = ContainerdServer.withFlatpull(flatpull.socket())) {
      ImageReference plain = DebianImage.pushPython(registry.address(), "bench/python", "plain");
      FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry()
          .withPlainHttp(true));
      System.err.println("recording the trace on the image converted with 64 KiB chunks");
      ImageReference recorded = plain.withTag("c65536");
      convert(config, plain, recorded, 64 << 10, work);
      Path tracePath = work.resolve("python.fptrace");
      Cli.Run r = Cli.inProcess("record", "--config", flatpull.config().toString(), "--plain-http",
          "--containerd-address", containerd.socket().toString(), "--namespace", ContainerdServer.NAMESPACE,
          "--out", tracePath.toString(), "--probe", "exit", recorded.toString(), "--", "/usr/bin/python3", "-c",
          "import json, http.server, email.parser, urllib.request, decimal, logging, argparse");
      if (r.exitCode() != 0) {
        throw new IllegalStateException("record failed: " + r.stderr());
      }
      Trace trace = TraceFile.read(tracePath);
      long sourceBytes = sourceSize(config, plain);
      System.out.printf(Locale.ROOT, "trace: %d pages (%.1f MiB) in %d files; the plain gzip image is %.1f MiB%n%n",
          trace.pages(), trace.bytes() / 1048576.0, trace.layers().get(0).files().size(), sourceBytes / 1048576.0);
      System.out.println("| chunk size | image (eStargz) | vs plain gzip | TOC | chunks covering the pages |"
          + " runtime image (chunks, default) | % of image | runtime image (pages) | lazy reads: requests | lazy"
          + " reads: bytes |");
      System.out.println("|---|---|---|---|---|---|---|---|---|---|");
      for (long size : sizes) {
        ImageReference ref = plain.withTag("c" + size);
        if (size != 64 << 10) {
          convert(config, plain, ref, size, work);
        }
        row(config, ref, size, trace, sourceBytes, work);
      }
    } finally {
      Processes.deleteTree(work);
    }
  }

  private static void convert(FlatpullConfig config, ImageReference src, ImageReference dst, long chunkSize, Path work)
      throws Exception {
    try (RegistryClients clients = clients(config, FetchStatistics::new)) {
      new ImageConverter(config.limits(), work.resolve("convert"), line -> {}).convert(clients.client(src), src,
          clients.client(dst), dst, new ImageConverter.Options(LayerFormat.ESTARGZ, chunkSize, List.of(), 9,
              Platform.current()));
    }
  }

  private static RegistryClients clients(FlatpullConfig config, java.util.function.Supplier<FetchStatistics> stats) {
    return new RegistryClients(config, RegistryCredentials.NONE, stats.get(), Sleeper.SYSTEM, InstantSource.system());
  }

  private static long sourceSize(FlatpullConfig config, ImageReference plain) throws Exception {
    try (RegistryClients clients = clients(config, FetchStatistics::new)) {
      return clients.client(plain).resolve(plain, Platform.current()).manifest().layers().stream()
          .mapToLong(Descriptor::size).sum();
    }
  }

  private static void row(FlatpullConfig config, ImageReference ref, long chunkSize, Trace recorded, long sourceBytes,
      Path work) throws Exception {
    FetchStatistics toc = new FetchStatistics();
    try (RegistryClients clients = new RegistryClients(config, RegistryCredentials.NONE, toc, Sleeper.SYSTEM,
        InstantSource.system())) {
      RegistryClient client = clients.client(ref);
      ImageManifest manifest = client.resolve(ref, Platform.current()).manifest();
      Descriptor layer = manifest.layers().get(0);
      long before = toc.bytes(RequestKind.BLOB_RANGE);
      LazyLayer lazy = new LayerOpener(client, config, work).open(layer);
      long tocBytes = toc.bytes(RequestKind.BLOB_RANGE) - before;
      Trace trace = retarget(recorded, manifest, layer.digest());
      RuntimeImageBuilder.LayerSource source = d -> lazy;
      long chunkBytes = 0;
      long[] size = new long[2];
      for (Verification v : Verification.values()) {
        RuntimeImageBuilder.Built built = new RuntimeImageBuilder(RuntimeImageSettings.DEFAULTS.withVerify(v),
            InstantSource.system(), "bench", line -> {}).build(trace, manifest, source);
        size[v.ordinal()] = built.statistics().blobBytes();
        if (v == Verification.IMAGE) {
          chunkBytes = built.statistics().contentBytes();
        }
      }
      // What a lazy loader without runtime image requests, with a page cache: per traced run in trace order, the
      // covering chunks not fetched before, in one coalesced request (no readahead).
      FetchStatistics lazyStats = new FetchStatistics();
      try (RegistryClients lazyClients = new RegistryClients(config, RegistryCredentials.NONE, lazyStats,
          Sleeper.SYSTEM, InstantSource.system())) {
        LazyLayer fresh = new LazyLayer(lazy.index(), range -> lazyClients.client(ref).readRange(layer.digest(), range),
            config.registry().coalesceGapBytes());
        LayerTrace lt = trace.layers().get(0);
        java.util.Set<dev.flatpull.fetcher.layer.LayerChunk> cached = new java.util.HashSet<>();
        for (PageRun run : lt.runs()) {
          LayerEntry e = lazy.index().contentOf(lazy.index().entry(lt.files().get(run.file())).orElseThrow());
          List<dev.flatpull.fetcher.layer.LayerChunk> missing = LazyLayer.covering(e, run.firstPage() * 4096,
              run.pages() * 4096L).stream().filter(c -> !c.stored().isEmpty() && cached.add(c)).toList();
          if (!missing.isEmpty()) {
            fresh.fetch(e, missing);
          }
        }
      }
      System.out.printf(Locale.ROOT, "| %d KiB | %.1f MiB | %.2fx | %.2f MiB | %.1f MiB | %.2f MiB | %.2f %% |"
              + " %.2f MiB (%.2f %%) | %d | %.1f MiB |%n",
          chunkSize >> 10, layer.size() / 1048576.0, (double) layer.size() / sourceBytes, tocBytes / 1048576.0,
          chunkBytes / 1048576.0, size[0] / 1048576.0, 100.0 * size[0] / sourceBytes, size[1] / 1048576.0,
          100.0 * size[1] / sourceBytes, lazyStats.requests(RequestKind.BLOB_RANGE),
          lazyStats.bytes(RequestKind.BLOB_RANGE) / 1048576.0);
    }
  }

  /** The recorded trace as if recorded on {@code manifest}: the same files and pages, in its one layer. */
  private static Trace retarget(Trace t, ImageManifest manifest, Digest layer) {
    ServiceVersion s = t.service();
    ServiceVersion moved = new ServiceVersion(s.image(), manifest.digest().toString(), s.platform(), s.command(),
        s.environment(), s.workingDirectory(), s.probes());
    LayerTrace l = t.layers().get(0);
    return new Trace(moved, t.flatpullVersion(), t.recordedAt(), t.readyMillis(),
        List.of(new LayerTrace(layer.toString(), l.files(), l.runs())));
  }
}
