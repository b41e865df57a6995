package dev.flatpull.manager;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.config.SnapshotterSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fuse.BackingFiles;
import dev.flatpull.fuse.ContentEvents;
import dev.flatpull.fuse.DeviceHandover;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerPrefetcher;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.fuse.MountHandover;
import dev.flatpull.fuse.PageSource;
import dev.flatpull.fuse.PendingProducers;
import dev.flatpull.fuse.ReadActivity;
import dev.flatpull.pagecache.CacheStats;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.TraceRecorder;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;
import java.util.logging.Logger;

/**
 * The remote-layer read path and its state: every lazily served layer, the host-wide page cache and the registry
 * clients they share, and the images being started ({@link ImageSession}: their layers' TOCs opened in parallel, their
 * runtime images streamed into the cache). The FUSE manager process serves it, so that restarting the snapshotter
 * daemon leaves containers' reads untouched; {@code flatpull mount} uses the same class, so there is one read path.
 */
public final class LayerServer implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(LayerServer.class.getName());
  // Set by the first mount asked for; the warm-up stops at it.
  private volatile boolean askedFor;

  /** One served layer. */
  public record Served(
      Path mountPoint, Descriptor layer, String imageRef, int entries, String format, LayerMount mount,
      List<LayerPrefetcher> prefetchers, Optional<String> image, ReadaheadKnobs readahead, String source) {}

  /** What serves a layer again, as the holder keeps it with the mount's device: the image and the descriptor. */
  private static String source(String imageRef, String descriptorJson) {
    return imageRef + "\n" + descriptorJson;
  }

  /**
   * The threads the server runs on, made by the composition root.
   *
   * @param decoders decompression and verification of the chunks of one request, on every core
   * @param transfers the requests of on-demand reads, read as they arrive: a read returns once its own chunks are in,
   *     while its readahead still arrives here
   * @param tocs opening layers' TOCs, several at once
   * @param loaders runtime-image lookups and streams
   * @param prefetch prefetching, one layer after another, never part of mounting
   * @param landing kernel landing: arriving runtime-image content pushed into the kernel's page cache, in order
   * @param spares building the FUSE file systems later mounts take, while reads are quiet (one thread, which waits)
   * @param timer delays (the background fetch after a runtime image)
   */
  public record Threads(ExecutorService decoders, ExecutorService transfers, ExecutorService tocs, ExecutorService loaders,
      ExecutorService prefetch, ExecutorService landing, ExecutorService spares, ScheduledExecutorService timer) {
    /** Daemon threads named for what they do. */
    public static Threads create() {
      // Each pool's threads set their CPU priority when they start (CpuPriority): what a read waits for ahead of the
      // services (its requests, which decode what it needs as it arrives, the runtime-image stream, and the TOCs,
      // which every Prepare of the image and so every first read waits for), the rest at the default, whoever made
      // the thread.
      return new Threads(Executors.newFixedThreadPool(Runtime.getRuntime().availableProcessors(), daemon("flatpull-decode")),
          // Bounded by the reads that start requests (libfuse's threads); past the bound a read sends its own.
          new java.util.concurrent.ThreadPoolExecutor(0, 64, 30, java.util.concurrent.TimeUnit.SECONDS,
              new java.util.concurrent.SynchronousQueue<>(), dev.flatpull.fuse.CpuPriority.ahead("flatpull-transfer")),
          // Below the stream, the TOC's parse took longer when the stream got faster: 30-80 ms more in five of eight
          // cells (docs/benchmarks.md, "The runtime-image path in the warm-up").
          Executors.newFixedThreadPool(4, dev.flatpull.fuse.CpuPriority.ahead("flatpull-toc")),
          Executors.newCachedThreadPool(dev.flatpull.fuse.CpuPriority.ahead("flatpull-runtime-image")),
          Executors.newSingleThreadExecutor(daemon("flatpull-prefetch")),
          Executors.newSingleThreadExecutor(daemon("flatpull-landing")),
          // Nothing waits for the spares: they are built while reads are quiet, at a low CPU priority.
          Executors.newSingleThreadExecutor(dev.flatpull.fuse.CpuPriority.background("flatpull-spares")),
          Executors.newSingleThreadScheduledExecutor(daemon("flatpull-timer")));
    }

    /**
     * Interrupts every task and waits (a second per pool at most) until they have stopped, so that none still runs when
     * the cache and the registry clients it uses are closed (a runtime-image lookup did, at a refused mount's exit).
     */
    void shutdown() {
      List<ExecutorService> all = List.of(timer, spares, landing, prefetch, loaders, tocs, transfers, decoders);
      all.forEach(ExecutorService::shutdownNow);
      try {
        for (ExecutorService e : all) {
          e.awaitTermination(1, java.util.concurrent.TimeUnit.SECONDS);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private final FlatpullConfig config;
  private final SnapshotterSettings settings;
  private final RuntimeImageSettings runtimeImages;
  private final FetchStatistics fetched;
  private final RegistryClients clients;
  private final PageCache cache;
  private final RemoteLayerMetrics metrics;
  private final LongSupplier nanoTime;
  private final InstantSource clock;
  private final Threads threads;
  private final ReadActivity activity;
  // The layers' kept index files: one home, so that a layer removed while its file waits to be written is not.
  private final dev.flatpull.fetcher.layer.KeptIndexes keptIndexes;
  /** A miss's first neighbourhood window (LayerContentReader): a few of the files that follow it. */
  private static final long NEIGHBOURHOOD = 256L << 10;
  private final Map<Path, Served> served = new ConcurrentHashMap<>();
  // Where kernel-engine mounts' devices go, so that they outlive this process (the FUSE manager's: handOverMounts).
  private volatile MountHandover handover = MountHandover.NONE;
  // By the pinned reference (registry, repository, manifest digest): the same manifest pulled from elsewhere is
  // another session, with its own registry client.
  private final Map<String, ImageSession> sessions = new ConcurrentHashMap<>();
  private final ExpectedLayers expected;
  private final RuntimeImageLoading runtimeImageLoading;
  private final TraceRecorder recorder = new TraceRecorder();
  private final BackingFiles backingFiles;
  private final ReadaheadKnobs knobs = new ReadaheadKnobs();
  // The file systems the next mounts take, built ahead and while reads are quiet (see LayerFileSystem#libfuse).
  private final Spares<LayerFileSystem> spares;
  /**
   * File systems kept ready: the remote layers of one cold start that find theirs built (containerd prepares an
   * image's layers one after another; under libfuse a mount that finds none builds its own, 10-35 ms).
   */
  static final int SPARE_FILE_SYSTEMS = 4;

  /**
   * @param fetched counts what {@code clients} fetch (the clients were made with it as their listener)
   * @param nanoTime the monotonic clock durations are measured with
   * @param clock the wall clock (trace ages)
   */
  public LayerServer(FlatpullConfig config, RegistryClients clients, FetchStatistics fetched, PageCache cache,
      RemoteLayerMetrics metrics, LongSupplier nanoTime, InstantSource clock, Threads threads) {
    this.config = config;
    this.settings = config.snapshotter();
    this.runtimeImages = config.runtimeImage();
    this.clients = clients;
    this.fetched = fetched;
    this.cache = cache;
    this.metrics = metrics;
    this.nanoTime = nanoTime;
    this.clock = clock;
    this.threads = threads;
    this.activity = new ReadActivity(settings.backgroundFetchQuiet(), nanoTime, () -> {});
    this.expected = new ExpectedLayers(nanoTime, metrics);
    // The kernel engine serves a file system as it is; libfuse's adapter of one (10-35 ms to make) is made ahead on a
    // node whose mounts take libfuse.
    this.spares = new Spares<>(SPARE_FILE_SYSTEMS,
        config.fuse().engine() == dev.flatpull.config.FuseSettings.Engine.LIBFUSE ? () -> {
          LayerFileSystem fs = new LayerFileSystem();
          fs.libfuse();
          return fs;
        } : LayerFileSystem::new, activity, threads.spares());
    this.keptIndexes = new dev.flatpull.fetcher.layer.KeptIndexes(cache.namedFiles(),
        new IndexWrites(threads.tocs(), this::whenQuiet, threads.timer(), KEEP_INDEX_WITHIN));
    // A passthrough read never reaches the recorder: none while reads are recorded.
    this.backingFiles = config.fuse().passthrough() ? new BackingFiles(cache, config.fuse().passthroughMinBytes(),
        this::whenQuiet, () -> !recorder.isRecording()) : BackingFiles.NONE;
    this.runtimeImageLoading = new RuntimeImageLoading(clients, cache, runtimeImages, metrics, nanoTime, clock,
        threads, this::mountOf, recorder::isRecording);
  }

  /** A server for {@code config} with its own registry clients, page cache and threads. */
  public static LayerServer open(FlatpullConfig config, RemoteLayerMetrics metrics)
      throws IOException, dev.flatpull.config.ConfigException {
    return open(config, metrics, java.util.concurrent.CompletableFuture.completedFuture(null));
  }

  /**
   * A server for {@code config}, whose page cache lists what it stored before only once {@code cacheListingMayStart}
   * completes ({@link PageCache#open(Path, dev.flatpull.config.CacheSettings, java.util.concurrent.CompletionStage)}).
   */
  public static LayerServer open(FlatpullConfig config, RemoteLayerMetrics metrics,
      java.util.concurrent.CompletionStage<?> cacheListingMayStart)
      throws IOException, dev.flatpull.config.ConfigException {
    FetchStatistics fetched = new FetchStatistics();
    RegistryClients clients = RegistryClients.create(config, fetched);
    PageCache cache;
    try {
      cache = PageCache.open(config.cache().directoryUnder(config.root()), config.cache(), cacheListingMayStart,
          dev.flatpull.fuse.CpuPriority::background);
    } catch (IOException | RuntimeException e) {
      clients.close();
      throw e;
    }
    return new LayerServer(config, clients, fetched, cache, metrics, System::nanoTime, InstantSource.system(),
        Threads.create());
  }

  /** Whether a layer has been asked for: the manager's warm-up, which runs while it serves, stops then. */
  public boolean askedFor() {
    return askedFor;
  }

  /**
   * Mounts a layer lazily at {@code mountPoint}; an existing mount of the same layer there is kept.
   *
   * @param manifest the image's manifest, when the caller has it: then it must be the manifest {@code imageRef}
   *     pins, all its layers' TOCs are opened at once and its runtime image is loaded
   */
  public Served mount(Path mountPoint, String imageRef, String descriptorJson, Optional<ImageManifest> manifest)
      throws IOException {
    askedFor = true;
    Path key = mountPoint.toAbsolutePath().normalize();
    Descriptor layer = OciDocuments.parseDescriptor(descriptorJson);
    Optional<Served> existing = existing(key, layer);
    return existing.isPresent() ? existing.get()
        : serve(key, layer, imageRef, source(imageRef, descriptorJson), manifest, null, false);
  }

  /**
   * Starts opening the TOC of a layer a Prepare asks for, as its labels describe it, while the daemon reads the image's
   * manifest ({@link ExpectedLayers}); the layer's mount takes it if the manifest agrees. eStargz layers only: nothing
   * else is fetched on the labels' word (a plain layer would be fetched whole).
   *
   * @return whether its opening started (not when it is already expected, or too many are)
   */
  public boolean expect(String imageRef, String descriptorJson) throws IOException {
    askedFor = true;
    activity.touch();
    ImageReference ref = ImageReference.parse(imageRef);
    Descriptor layer = OciDocuments.parseDescriptor(descriptorJson);
    if (LayerFormat.of(layer) != LayerFormat.ESTARGZ) {
      throw new IOException("layer " + layer.digest() + " is described as " + layer.mediaType()
          + " without a TOC digest: only an eStargz layer's TOC is opened before the manifest is read");
    }
    if (sessions.values().stream().anyMatch(x -> x.opens(layer.digest()))) {
      return false; // its image's session opens it already
    }
    LayerOpener opener = opener(ref);
    return expected.expect(layer, () -> ImageSession.open(opener, layer, threads.tocs()));
  }

  /**
   * Serves the mount at {@code mountPoint} that a manager before this one made and served: its FUSE device is taken
   * back from the daemon's holder ({@link MountHandover}), its layer opened again (from the kept index file, else its
   * TOC: the same index, so the same node numbers the kernel holds), and the requests the dead manager left
   * unanswered are resent. The mount point is not touched before: until this serves, every access to it waits.
   *
   * @throws IOException when the daemon holds no device for it, or the layer cannot be opened (the device is then
   *     left to the holder, and the containers' reads keep waiting for the next attempt)
   */
  public Served takeOver(Path mountPoint, String imageRef, String descriptorJson) throws IOException {
    askedFor = true;
    Path key = mountPoint.toAbsolutePath().normalize();
    Descriptor layer = OciDocuments.parseDescriptor(descriptorJson);
    Optional<Served> existing = existing(key, layer);
    if (existing.isPresent()) {
      return existing.get();
    }
    MountHandover.Taken taken = handover.take(key).orElseThrow(() -> new IOException(
        "the daemon holds no FUSE device for " + key + ": it cannot be taken over"));
    return serve(key, layer, imageRef, source(imageRef, descriptorJson), Optional.empty(), taken, true);
  }

  /**
   * Takes over every mount whose device the daemon holds, at once, before this manager answers the daemon: a manager
   * started after one that died serves the running containers' mounts without waiting for the daemon to ask for each.
   * A mount that cannot be taken over here is left to the daemon, which asks again ({@link #takeOver}) or lets it go.
   *
   * @return the mounts taken over
   */
  public int takeOverHeld() {
    try {
      return takeOver(heldMounts(), true).size();
    } catch (IOException e) {
      LOG.warning("asking the daemon for the FUSE devices it holds failed: " + e.getMessage());
      return 0;
    }
  }

  /**
   * Every mount whose FUSE device the daemon holds, with a descriptor of that device: this process's from here on, to
   * serve ({@link #takeOver(List, boolean)}) or close. Empty when no daemon listens.
   */
  public List<MountHandover.Taken> heldMounts() throws IOException {
    return handover.takeAll();
  }

  /**
   * Serves each of {@code taken} ({@link #heldMounts}) through its device; one already served here, or that fails,
   * has its descriptor closed (the daemon still holds the device).
   *
   * @param resend whether the requests read and not answered are asked for again at once: false while the manager
   *     that read them still serves beside this one (a planned replacement; {@link #resend} once it has exited)
   * @return the mount points taken over
   */
  public List<Path> takeOver(List<MountHandover.Taken> taken, boolean resend) {
    List<Path> out = new java.util.ArrayList<>();
    for (MountHandover.Taken t : taken) {
      String[] src = t.source().split("\n", 2);
      try {
        if (src.length != 2) {
          throw new IOException("the held source says no layer");
        }
        Descriptor layer = OciDocuments.parseDescriptor(src[1]);
        if (served.containsKey(t.mountPoint())) {
          DeviceHandover.closeDescriptor(t.device());
          continue;
        }
        askedFor = true;
        serve(t.mountPoint(), layer, src[0], t.source(), Optional.empty(), t, resend);
        out.add(t.mountPoint());
      } catch (IOException | RuntimeException e) {
        if (!served.containsKey(t.mountPoint())) {
          DeviceHandover.closeDescriptor(t.device());
        }
        LOG.warning("taking over " + t.mountPoint() + " failed (the daemon asks again): " + e.getMessage());
      }
    }
    return out;
  }

  /**
   * Asks the kernel to queue again the requests of the mounts at {@code mountPoints} that were read and not answered:
   * those of a manager that retired, once it has exited.
   */
  public void resend(java.util.Collection<Path> mountPoints) {
    for (Path p : mountPoints) {
      Served s = served.get(p);
      if (s == null) {
        continue;
      }
      try {
        s.mount().resend();
      } catch (IOException | RuntimeException e) {
        LOG.warning("asking the kernel to resend the requests of " + p + " failed (one still unanswered waits): "
            + e.getMessage());
      }
    }
  }

  private Optional<Served> existing(Path key, Descriptor layer) throws IOException {
    Served existing = served.get(key);
    if (existing != null && !existing.layer().digest().equals(layer.digest())) {
      throw new IOException(key + " already serves layer " + existing.layer().digest());
    }
    return Optional.ofNullable(existing);
  }

  /** Hands every kernel-engine mount over to the daemon's holder from now on (the FUSE manager's own). */
  public void handOverMounts(Path holderSocket) {
    handover = MountHandover.start(holderSocket, () -> {
      Map<Path, MountHandover.Handed> out = new java.util.HashMap<>();
      served.forEach((p, s) -> s.mount().connection().ifPresent(c -> out.put(p, new MountHandover.Handed(c,
          s.source()))));
      return out;
    });
  }

  /**
   * Mounts {@code layer} at {@code key}, or with {@code taken} serves the mount another manager made through its
   * device (closed here if serving fails before the mount takes it), asking the kernel to {@code resend} what that
   * manager left unanswered.
   */
  private Served serve(Path key, Descriptor layer, String imageRef, String source, Optional<ImageManifest> manifest,
      MountHandover.Taken taken, boolean resend) throws IOException {
    long t0 = nanoTime.getAsLong();
    // A layer being mounted means a container is about to start reading: background fetching waits for it too.
    activity.touch();
    ImageReference ref = ImageReference.parse(imageRef);
    Optional<ImageSession> session;
    LazyLayer lazy;
    try {
      session = manifest.isEmpty() ? Optional.empty() : Optional.of(session(ref, manifest.get()));
      lazy = session.isPresent() ? session.get().layer(layer) : opener(ref).open(layer);
    } catch (IOException | RuntimeException e) {
      if (taken != null) {
        DeviceHandover.closeDescriptor(taken.device());
      }
      throw e;
    }
    long t1 = nanoTime.getAsLong();
    TraceRecorder.ReadTap tap = recorder.tap(layer.digest().toString());
    FuseEvents events = new FuseEvents() {
      @Override
      public void readServed(String path, long offset, int bytes) {
        tap.read(path, offset, bytes);
      }

      @Override
      public void operationFailed(String operation, String path, int errno, Throwable cause) {
        metrics.operationFailed(operation, failureCause(cause));
      }
    };
    LayerContentReader reader = new LayerContentReader(lazy, cache, LayerContentReader.DEFAULT_READAHEAD, activity,
        contentEvents(session), session.<PendingProducers>map(x -> () -> runtimeImageLoading.awaitAnnounced(x))
            .orElse(PendingProducers.NONE), session.map(x -> x.pagesOf(layer.digest())).orElse(PageSource.NONE),
        NEIGHBOURHOOD);
    LayerTree tree = LayerTree.of(lazy.index());
    long t2 = nanoTime.getAsLong();
    LayerMount m;
    if (taken == null) {
      m = LayerMount.mount(spares.take().bind(tree, reader, events), key, config.fuse().engine(), backingFiles, 0);
    } else {
      try {
        m = LayerMount.resume(spares.take().bind(tree, reader, events), key, taken.device(), taken.negotiation(),
            backingFiles, resend);
      } catch (IOException | RuntimeException e) {
        DeviceHandover.closeDescriptor(taken.device());
        throw e;
      }
    }
    long t3 = nanoTime.getAsLong();
    // After the mount, whose tree it slowed on 2 cores when built beside it, and before the first read, which waited
    // for it.
    threads.tocs().execute(reader::prepare);
    ReadaheadKnobs readahead = new ReadaheadKnobs();
    session.ifPresent(x -> runtimeImageLoading.narrowWhileStarting(x, key, readahead));
    List<LayerPrefetcher> prefetchers = prefetch(lazy, session, new DiffIdCheck(lazy.index(),
        session.map(x -> x.manifest), cache, d -> clients.client(ref).fetchBlob(d), metrics));
    Served s = new Served(key, layer, imageRef, lazy.index().entries().size(), formatName(lazy), m, prefetchers,
        session.map(x -> x.reference.toString()), readahead, source);
    served.put(key, s);
    m.connection().ifPresent(c -> handover.hold(key, new MountHandover.Handed(c, source)));
    session.ifPresent(x -> runtimeImageLoading.layerMounted(x, layer.digest()));
    metrics.layerMounted(Duration.ofNanos(t1 - t0), Duration.ofNanos(t2 - t1), Duration.ofNanos(t3 - t2));
    LOG.info((taken == null ? "serving " : "took over serving ") + layer.digest() + " of " + imageRef + " at " + key
        + " (" + lazy.index().entries().size()
        + " entries, " + lazy.index().format() + "): " + (lazy.index().fromKeptFile() ? "index read from its kept file"
        : "TOC fetched and verified") + " in " + (t1 - t0) / 1_000_000 + " ms, tree built in " + (t2 - t1) / 1_000_000 + " ms, mounted in " + (t3 - t2) / 1_000_000 + " ms"
        + session.map(x -> ", " + (t3 - x.startedNanos) / 1_000_000 + " ms after the image's first Prepare"
            + (x.openedAheadOfManifest(layer.digest()) ? " (its TOC asked for with the Prepare, ahead of the manifest)"
            : "")).orElse(""));
    return s;
  }

  /** A bounded tag for why an operation failed: the first cause in the chain that says. */
  static String failureCause(Throwable t) {
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof dev.flatpull.core.DigestMismatchException) {
        return "verification";
      }
      if (c instanceof dev.flatpull.fetcher.registry.RegistryException) {
        return "registry";
      }
    }
    return "other";
  }

  private LayerOpener opener(ImageReference ref) {
    return new LayerOpener(clients.client(ref), config, config.root().resolve("layers"), threads.decoders(),
        threads.transfers()).keepingIndexes(keptIndexes);
  }

  /**
   * Runs {@code work} on the spares' thread once reads are quiet: work a start does not wait for (writing a layer's
   * index file), which must not take a core from the start.
   */
  private void whenQuiet(Runnable work) {
    threads.spares().execute(() -> {
      try {
        activity.awaitIdle();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
      work.run();
    });
  }

  /** How long a large layer's index file waits for quiet reads at most ({@link IndexWrites}). */
  static final Duration KEEP_INDEX_WITHIN = Duration.ofSeconds(30);

  /** The session of {@code manifest}, started (TOCs opening, runtime image loading) if this is its first layer. */
  private ImageSession session(ImageReference ref, ImageManifest manifest) throws IOException {
    if (ref.digest().isPresent() && !ref.digest().get().equals(manifest.digest())) {
      throw new IOException("the manifest given is " + manifest.digest() + ", but " + ref + " pins another");
    }
    ImageReference pinned = ref.withDigest(manifest.digest());
    boolean[] created = {false};
    ImageSession s = sessions.computeIfAbsent(pinned.toString(), d -> {
      created[0] = true;
      return new ImageSession(pinned, manifest, nanoTime.getAsLong(), opener(pinned), threads.tocs(), expected);
    });
    if (created[0]) {
      s.openLayers();
      runtimeImageLoading.start(s);
    }
    return s;
  }

  /** Where {@code layer} of the image of {@code session} is mounted, if it is yet. */
  private Optional<LayerMount> mountOf(ImageSession session, Digest layer) {
    return served.values().stream()
        .filter(x -> x.image().equals(Optional.of(session.reference.toString())) && x.layer().digest().equals(layer))
        .map(Served::mount).findFirst();
  }

  /** Counts where served content came from, and the first byte of an image's start. */
  private ContentEvents contentEvents(Optional<ImageSession> session) {
    return (content, bytes, origin) -> {
      boolean streamed = runtimeImageLoading.brought(content);
      String source = switch (origin) {
        case FETCHED -> "lazy";
        case WAITED -> streamed ? "runtime_image" : "lazy";
        case PRESENT -> streamed ? "runtime_image" : "cache";
      };
      metrics.contentServed(source, bytes);
      session.ifPresent(s -> {
        if (s.firstByteServed()) {
          metrics.firstByte(Duration.ofNanos(nanoTime.getAsLong() - s.startedNanos));
        }
      });
    };
  }

  /**
   * Files containerd reads at every container's create, before the container runs: from 1.6 on, the spec it builds
   * from the image mounts the root file system to look up {@code /etc/passwd} and {@code /etc/group}
   * ({@code oci.WithAdditionalGIDs}). A lazy start prefetches them with the landmark's files, so that the create does
   * not wait for them; a start from a runtime image leaves them to it (and to on-demand reads).
   */
  static final List<String> READ_AT_CREATE = List.of("etc/passwd", "etc/group");

  /**
   * Starts prefetching a layer: at once without a session; with one, after its runtime-image lookup, and when a
   * runtime image brought content, the background fetch only after {@code [runtime_image] startup_window}, so that
   * it does not compete with the start the runtime image is for.
   */
  private List<LayerPrefetcher> prefetch(LazyLayer lazy, Optional<ImageSession> session, DiffIdCheck whenWhole) {
    List<String> prioritized = settings.prefetch() ? lazy.index().prioritized() : List.of();
    List<String> lazyStart = new ArrayList<>(prioritized);
    if (settings.prefetch()) {
      lazyStart.addAll(0, READ_AT_CREATE);
    }
    if (!settings.prefetch() && !settings.backgroundFetch()) {
      return List.of();
    }
    if (session.isEmpty()) {
      LayerPrefetcher p = new LayerPrefetcher(lazy, cache, activity, lazyStart, settings.backgroundFetch())
          .whenWhole(whenWhole);
      threads.prefetch().execute(p);
      return List.of(p);
    }
    LayerPrefetcher withRuntimeImage = new LayerPrefetcher(lazy, cache, activity, prioritized, false);
    LayerPrefetcher withoutRuntimeImage = new LayerPrefetcher(lazy, cache, activity, lazyStart, false);
    LayerPrefetcher rest = new LayerPrefetcher(lazy, cache, activity, List.of(), settings.backgroundFetch())
        .whenWhole(whenWhole);
    session.get().runtimeImage.thenAccept(loaded -> {
      threads.prefetch().execute(loaded ? withRuntimeImage : withoutRuntimeImage);
      if (!settings.backgroundFetch()) {
        return;
      }
      if (loaded) {
        threads.timer().schedule(() -> threads.prefetch().execute(rest),
            runtimeImages.startupWindow().toMillis(), TimeUnit.MILLISECONDS);
      } else {
        threads.prefetch().execute(rest);
      }
    });
    return List.of(withRuntimeImage, withoutRuntimeImage, rest);
  }

  private static String formatName(LazyLayer lazy) {
    return switch (lazy.index().format()) {
      case ESTARGZ -> "estargz";
      case ZSTD_CHUNKED -> "zstd:chunked";
      case PLAIN -> "plain";
    };
  }

  /**
   * Unmounts {@code mountPoint} (lazily: open files keep working until closed) for a layer that is removed from the
   * node: its kept index file goes with it unless another mount serves the same layer. Unknown mount points are fine.
   */
  public void unmount(Path mountPoint) throws IOException {
    unmount(mountPoint, true);
  }

  /**
   * Unmounts {@code mountPoint}.
   *
   * @param layerRemoved whether the layer leaves the node (its index file is removed) or may be mounted again (kept)
   */
  public void unmount(Path mountPoint, boolean layerRemoved) throws IOException {
    Path key = mountPoint.toAbsolutePath().normalize();
    Served s = served.remove(key);
    if (s == null) {
      if (LayerMount.isMounted(key)) {
        LayerMount.unmountLazily(key);
      }
      return;
    }
    s.prefetchers().forEach(LayerPrefetcher::stop);
    s.readahead().restore();
    s.mount().close();
    handover.drop(key);
    if (layerRemoved && served.values().stream().noneMatch(o -> o.layer().digest().equals(s.layer().digest()))) {
      try {
        keptIndexes.forget(s.layer());
      } catch (IOException | RuntimeException e) {
        LOG.warning("removing the index file of layer " + s.layer().digest() + " failed: " + e);
      }
    }
    // The image's session ends with its last served layer: a later start of it looks for its runtime image again.
    s.image().ifPresent(d -> {
      if (served.values().stream().noneMatch(o -> o.image().equals(Optional.of(d)))) {
        sessions.remove(d);
      }
    });
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

  /** Empties the page cache ({@link PageCache#empty}); served layers fetch what they read next. */
  public PageCache.Emptied emptyCache() throws IOException {
    PageCache.Emptied e = cache.empty();
    LOG.info("page cache emptied: " + e.diskEntries() + " entries, " + e.diskBytes() + " bytes on disk, "
        + e.memoryEntries() + " in memory");
    return e;
  }

  /** Unmounts every layer; for stopping deliberately. */
  @Override
  public void close() throws IOException {
    for (Path p : new ArrayList<>(served.keySet())) {
      unmount(p);
    }
    handover.close();
    threads.shutdown();
    cache.close();
    clients.close();
  }

  private static java.util.concurrent.ThreadFactory daemon(String name) {
    return dev.flatpull.fuse.CpuPriority.named(name);
  }
}
