package dev.flatpull.it.bench;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.core.ByteRange;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.it.Processes;
import dev.flatpull.it.RegistryServer;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.pagecache.ProducerProgress;
import dev.flatpull.runtimeimage.ImageBinding;
import dev.flatpull.runtimeimage.RuntimeImageArtifact;
import dev.flatpull.runtimeimage.RuntimeImageBuilder;
import dev.flatpull.runtimeimage.RuntimeImageDecoder;
import dev.flatpull.runtimeimage.RuntimeImageFormat;
import dev.flatpull.runtimeimage.RuntimeImagePublisher;
import dev.flatpull.runtimeimage.RuntimeImageStream;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * A runtime image's way from the socket into the page cache (decode, verify, store), beside what bounds it, in one
 * run: the same blob drained from the same registry through the same client (the socket), and decoded and verified
 * from memory (the CPU). A registry process on loopback serves a generated image ({@link SyntheticImage}: {@code
 * --mib} MiB of code-like content traced, every page of every other file of 256 KiB in an image twice that size,
 * 16 KiB chunks as flatpull converts by default) and its runtime image; each round streams it into a fresh page cache on disk with the manager's default
 * settings, alternating with the baselines, and prints MB/s of content (decompressed) for each and their ratios as
 * medians over {@code --rounds}.
 */
public final class RuntimeImageStreamBenchmark {
  private RuntimeImageStreamBenchmark() {}

  public static void main(String[] args) throws Exception {
    int mib = 128;
    int rounds = 5;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--mib" -> mib = Integer.parseInt(args[++i]);
        case "--rounds" -> rounds = Integer.parseInt(args[++i]);
        default -> throw new IllegalArgumentException("usage: [--mib N] [--rounds N]");
      }
    }
    long started = System.nanoTime();
    System.out.println(ManagerHashing.install());
    Path dir = Files.createTempDirectory(Path.of("/var/tmp"), "flatpull-stream-bench-");
    try (RegistryServer registry = RegistryServer.start()) {
      int fileSize = 256 << 10;
      SyntheticImage image = SyntheticImage.generate(dir, mib * 8, fileSize, 16 << 10, 2);
      RuntimeImageBuilder.Built built = image.runtimeImage(RuntimeImageSettings.DEFAULTS);
      FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry()
          .withPlainHttp(true));
      try (RegistryClients clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE,
          Sleeper.SYSTEM, InstantSource.system())) {
        RegistryClient client = clients.client(ImageReference.parse(registry.address() + "/bench/app:v1"));
        client.pushBlob(image.config(), image.configBlob());
        client.pushBlob(image.layerDescriptor(), image.layerBlob());
        client.pushManifest("v1", MediaTypes.OCI_MANIFEST, image.manifest().raw());
        RuntimeImagePublisher publisher = RuntimeImagePublisher.of(client);
        publisher.push(built.index(), built.blob(), new Descriptor(MediaTypes.OCI_MANIFEST, image.manifest().digest(),
            image.manifest().raw().length, Map.of()));
        RuntimeImageArtifact artifact = publisher.list(image.manifest().digest()).get(0);
        Descriptor blob = RuntimeImagePublisher.blobOf(client, artifact, image.manifest().digest());
        RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(built.blob());
        ImageBinding binding = ImageBinding.bind(layout.index(), image.manifest(),
            Map.of(image.layerDescriptor().digest(), image.index()));
        long content = layout.index().contentBytes();
        System.out.printf(Locale.ROOT, "runtime image: %d frames, %d extents, %.1f MB of content in %.1f MB stored%n",
            layout.index().frames().size(), layout.index().extentCount(), content / 1e6, blob.size() / 1e6);

        List<Double> socket = new ArrayList<>();
        List<Double> cpu = new ArrayList<>();
        List<Double> stream = new ArrayList<>();
        List<Double> stored = new ArrayList<>();
        for (int round = -1; round < rounds; round++) {
          // Round -1 warms the JIT up on every path and is not counted.
          long t0 = System.nanoTime();
          long drained = client.streamRange(blob.digest(), new ByteRange(0, blob.size()), RuntimeImageStreamBenchmark::drain);
          double s = seconds(t0);
          if (drained != blob.size()) {
            throw new IllegalStateException("drained " + drained + " of " + blob.size());
          }
          t0 = System.nanoTime();
          RuntimeImageDecoder.Result decoded = RuntimeImageDecoder.decode(layout, built.blob(), binding,
              (l, e, c) -> {});
          double c = seconds(t0);
          if (!decoded.rejected().isEmpty()) {
            throw new IllegalStateException(decoded.rejected().get(0).toString());
          }
          Path cacheDir = dir.resolve("cache-" + (round + 1));
          double st;
          double sw;
          try (PageCache cache = PageCache.open(cacheDir, CacheSettings.DEFAULTS)) {
            t0 = System.nanoTime();
            RuntimeImageStream.Outcome o = new RuntimeImageStream(client, cache, new ProducerProgress(
                RuntimeImageSettings.DEFAULTS.stall()), (layer, path, offset, length, d) -> {},
                RuntimeImageSettings.DEFAULTS.verify(), RuntimeImageSettings.DEFAULTS.limits())
                .load(artifact, image.manifest(), x -> image.index());
            st = seconds(t0);
            cache.awaitWrites();
            sw = seconds(t0);
            if (o.failure().isPresent() || o.delivered() != o.contents()) {
              throw new IllegalStateException(o.toString());
            }
          }
          Processes.deleteTree(cacheDir);
          if (round >= 0) {
            socket.add(content / s / 1e6);
            cpu.add(content / c / 1e6);
            stream.add(content / st / 1e6);
            stored.add(content / sw / 1e6);
          }
          System.out.printf(Locale.ROOT, "round %d: socket %.0f, decode+verify %.0f, stream into the cache %.0f"
              + " (%.0f with its disk writes done) MB/s of content%n", round, content / s / 1e6, content / c / 1e6,
              content / st / 1e6, content / sw / 1e6);
        }
        double sk = median(socket);
        double cp = median(cpu);
        double sm = median(stream);
        double sd = median(stored);
        System.out.printf(Locale.ROOT, "%nmedian of %d rounds, MB/s of content (%.1f MB):%n", rounds, content / 1e6);
        System.out.printf(Locale.ROOT, "| socket (drain the blob) | decode + verify in memory | stream into the page"
            + " cache | with its disk writes done | stream / socket | stream / decode |%n|---|---|---|---|---|---|%n");
        System.out.printf(Locale.ROOT, "| %.0f | %.0f | %.0f | %.0f | %.2f | %.2f |%n", sk, cp, sm, sd, sm / sk,
            sm / cp);
      }
    } finally {
      Processes.deleteTree(dir);
      System.out.printf(Locale.ROOT, "elapsed %.1f s%n", seconds(started));
    }
  }

  private static long drain(InputStream in) throws java.io.IOException {
    byte[] buf = new byte[64 << 10];
    long n = 0;
    for (int r; (r = in.read(buf)) > 0; ) {
      n += r;
    }
    return n;
  }

  private static double seconds(long since) {
    return (System.nanoTime() - since) / 1e9;
  }

  private static double median(List<Double> v) {
    double[] a = v.stream().mapToDouble(Double::doubleValue).sorted().toArray();
    return a.length % 2 == 1 ? a[a.length / 2] : (a[a.length / 2 - 1] + a[a.length / 2]) / 2;
  }
}
