package dev.flatpull.snapshotter.remote;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.SnapshotterSettings;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerPrefetcher;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.fuse.ReadActivity;
import dev.flatpull.pagecache.CacheStats;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.TraceRecorder;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.logging.Logger;

/**
 * The FUSE manager's state: every lazily served layer, the host-wide page cache and the registry clients they share.
 * It lives in its own process so that restarting the snapshotter daemon leaves containers' reads untouched.
 */
public final class LayerServer implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(LayerServer.class.getName());

  /** One served layer. */
  public record Served(
      Path mountPoint, Descriptor layer, String imageRef, int entries, String format, LayerMount mount,
      LayerPrefetcher prefetcher) {}

  private final FlatpullConfig config;
  private final SnapshotterSettings settings;
  private final FetchStatistics fetched = new FetchStatistics();
  private final RegistryClients clients;
  private final PageCache cache;
  private final ReadActivity activity = new ReadActivity();
  private final Map<Path, Served> served = new ConcurrentHashMap<>();
  private final TraceRecorder recorder = new TraceRecorder();
  private final ReadaheadKnobs knobs = new ReadaheadKnobs();
  private final ExecutorService decoders = Executors.newFixedThreadPool(
      Runtime.getRuntime().availableProcessors(), daemon("flatpull-decode"));
  // Prefetching never delays a mount: one layer after another, while reads are served.
  private final ExecutorService prefetch = Executors.newSingleThreadExecutor(daemon("flatpull-prefetch"));

  public LayerServer(FlatpullConfig config) throws IOException, dev.flatpull.config.ConfigException {
    this.config = config;
    this.settings = config.snapshotter();
    this.clients = RegistryClients.create(config, fetched);
    this.cache = PageCache.open(config.cache().directoryUnder(config.root()), config.cache());
    long started = System.nanoTime();
    try {
      // A fresh JVM pays for compiling the cold path and binding libfuse: now, not in a container's first Prepare.
      WarmUp.run(config.root().resolve("warm-up"));
      LOG.info(String.format("warmed up the remote-layer path in %.0f ms", (System.nanoTime() - started) / 1e6));
    } catch (IOException e) {
      LOG.warning("warm-up failed (the first remote Prepare will be slower): " + e);
    }
  }

  /** Mounts a layer lazily at {@code mountPoint}; an existing mount of the same layer there is kept. */
  public Served mount(Path mountPoint, String imageRef, String descriptorJson) throws IOException {
    Path key = mountPoint.toAbsolutePath().normalize();
    Descriptor layer = OciDocuments.parseDescriptor(descriptorJson);
    Served existing = served.get(key);
    if (existing != null) {
      if (existing.layer().digest().equals(layer.digest())) {
        return existing;
      }
      throw new IOException(key + " already serves layer " + existing.layer().digest());
    }
    long t0 = System.nanoTime();
    ImageReference ref = ImageReference.parse(imageRef);
    LayerOpener opener = new LayerOpener(clients.client(ref), config, config.root().resolve("layers"), decoders);
    LazyLayer lazy = opener.open(layer);
    long t1 = System.nanoTime();
    LayerContentReader reader = new LayerContentReader(lazy, cache, LayerContentReader.DEFAULT_READAHEAD, activity);
    TraceRecorder.ReadTap tap = recorder.tap(layer.digest().toString());
    FuseEvents events = new FuseEvents() {
      @Override
      public void readServed(String path, long offset, int bytes) {
        tap.read(path, offset, bytes);
      }
    };
    LayerTree tree = LayerTree.of(lazy.index());
    long t2 = System.nanoTime();
    LayerMount m = LayerMount.mount(new LayerFileSystem(tree, reader, events), key);
    long t3 = System.nanoTime();
    LayerPrefetcher p = null;
    if (settings.prefetch() || settings.backgroundFetch()) {
      p = new LayerPrefetcher(lazy, cache, activity, settings.prefetch() ? lazy.index().prioritized() : List.of(),
          settings.backgroundFetch());
      prefetch.execute(p);
    }
    Served s = new Served(key, layer, imageRef, lazy.index().entries().size(), formatName(lazy), m, p);
    served.put(key, s);
    LOG.info("serving " + layer.digest() + " of " + imageRef + " at " + key + " (" + lazy.index().entries().size()
        + " entries, " + lazy.index().format() + "): TOC fetched and verified in " + (t1 - t0) / 1_000_000
        + " ms, tree built in " + (t2 - t1) / 1_000_000 + " ms, mounted in " + (t3 - t2) / 1_000_000 + " ms");
    return s;
  }


  private static String formatName(LazyLayer lazy) {
    return switch (lazy.index().format()) {
      case ESTARGZ -> "estargz";
      case ZSTD_CHUNKED -> "zstd:chunked";
      case PLAIN -> "plain";
    };
  }

  /** Unmounts {@code mountPoint} (lazily: open files keep working until closed). Unknown mount points are fine. */
  public void unmount(Path mountPoint) throws IOException {
    Path key = mountPoint.toAbsolutePath().normalize();
    Served s = served.remove(key);
    if (s == null) {
      if (LayerMount.isMounted(key)) {
        LayerMount.unmountLazily(key);
      }
      return;
    }
    if (s.prefetcher() != null) {
      s.prefetcher().stop();
    }
    s.mount().close();
    LOG.info("unmounted " + key);
  }

  /**
   * Starts recording the reads of every served layer, and narrows the kernel's readahead on their mounts.
   *
   * @return what could not be narrowed
   */
  public List<String> startRecording() {
    List<String> notes = knobs.narrow(served.keySet().stream().sorted().toList());
    recorder.start();
    LOG.info("recording reads of " + served.size() + " layers");
    return notes;
  }

  /** Stops recording, restores readahead, and returns the pages read per layer digest. */
  public List<LayerTrace> stopRecording() {
    try {
      return List.copyOf(recorder.stop().values());
    } finally {
      knobs.restore();
    }
  }

  public List<Served> served() {
    return List.copyOf(served.values());
  }

  public FetchStatistics fetched() {
    return fetched;
  }

  public CacheStats cacheStats() {
    return cache.stats();
  }

  /** Unmounts every layer; for stopping the manager deliberately. */
  @Override
  public void close() throws IOException {
    for (Path p : List.copyOf(served.keySet())) {
      unmount(p);
    }
    prefetch.shutdownNow();
    decoders.shutdownNow();
    cache.close();
    clients.close();
  }

  private static java.util.concurrent.ThreadFactory daemon(String name) {
    return r -> {
      Thread t = new Thread(r, name);
      t.setDaemon(true);
      return t;
    };
  }
}
