package dev.flatpull.manager;

import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.pagecache.ProducerProgress;
import dev.flatpull.runtimeimage.BorrowedIndex;
import dev.flatpull.runtimeimage.RuntimeImageArtifact;
import dev.flatpull.runtimeimage.RuntimeImageFormatException;
import dev.flatpull.runtimeimage.RuntimeImageLimitException;
import dev.flatpull.runtimeimage.RuntimeImageMismatchException;
import dev.flatpull.runtimeimage.RuntimeImagePublisher;
import dev.flatpull.runtimeimage.RuntimeImageSelection;
import dev.flatpull.runtimeimage.RuntimeImageStream;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;
import java.util.logging.Logger;

/**
 * The runtime images of the FUSE manager's image sessions: at an image's first layer, looks its runtime image up,
 * chooses one and streams it into the page cache (docs/runtime-images.md); the reads of its layers wait for what the
 * stream announced, their readahead stays narrowed while the image starts, and content the stream brought is counted
 * as served from it. Thread-safe.
 */
final class RuntimeImageLoading {
  private static final Logger LOG = Logger.getLogger(RuntimeImageLoading.class.getName());

  /** The mount of a layer of an image session, if it is mounted yet (kernel landing pushes into it). */
  @FunctionalInterface
  interface Mounts {
    Optional<dev.flatpull.fuse.LayerMount> of(ImageSession session, Digest layer);
  }

  private final RegistryClients clients;
  private final PageCache cache;
  private final RuntimeImageSettings settings;
  private final RemoteLayerMetrics metrics;
  private final LongSupplier nanoTime;
  private final InstantSource clock;
  private final LayerServer.Threads threads;
  private final Mounts mounts;
  // Whether reads are being recorded: then nothing is pushed into the kernel, whose page cache would answer reads that
  // the recorder must see.
  private final java.util.function.BooleanSupplier recording;
  // Content a runtime-image stream brought, so that reads of it count as served from the runtime image.
  private final Set<Digest> brought = ConcurrentHashMap.newKeySet();
  // Manifests whose runtime images this node loaded, per repository: where a later version looks first.
  private final RememberedSubjects loadedSubjects;

  RuntimeImageLoading(RegistryClients clients, PageCache cache, RuntimeImageSettings settings,
      RemoteLayerMetrics metrics, LongSupplier nanoTime, InstantSource clock, LayerServer.Threads threads,
      Mounts mounts, java.util.function.BooleanSupplier recording) {
    this.clients = clients;
    this.cache = cache;
    this.settings = settings;
    this.metrics = metrics;
    this.nanoTime = nanoTime;
    this.clock = clock;
    this.threads = threads;
    this.mounts = mounts;
    this.recording = recording;
    this.loadedSubjects = new RememberedSubjects(cache.namedFiles());
  }

  /** Starts loading the runtime image of a new session on the loaders' threads, or completes it at once when off. */
  void start(ImageSession s) {
    if (settings.load()) {
      threads.loaders().execute(() -> load(s));
    } else {
      metrics.runtimeImageLookup("disabled");
      s.found.complete(false);
      s.announced.complete(null);
      s.runtimeImage.complete(false);
    }
  }

  /** Whether a runtime-image stream brought {@code content}. */
  boolean brought(Digest content) {
    return brought.contains(content);
  }

  /** Looks for the image's runtime image, chooses one and streams it in; never throws, always completes. */
  private void load(ImageSession s) {
    Digest image = s.manifest.digest();
    long started = nanoTime.getAsLong();
    try {
      RegistryClient client = clients.client(s.reference);
      RuntimeImagePublisher publisher = RuntimeImagePublisher.of(client, clock);
      RuntimeImageSelection chosen = RuntimeImageSelection.of(publisher.list(image, threads.loaders()), settings);
      chosen.passedOver().forEach(p -> metrics.runtimeImagePassedOver(p.reason()));
      if (!chosen.passedOver().isEmpty()) {
        LOG.info("runtime images of " + s.reference + " passed over: " + chosen.passedOverDetail());
      }
      if (chosen.chosen().isEmpty()) {
        String reason = chosen.reason().orElse("none_found");
        if (settings.borrow() && reason.equals("none_found") && borrow(s, client, publisher, started)) {
          return;
        }
        metrics.runtimeImageLookup(reason);
        LOG.info("no runtime image for " + s.reference + ": " + chosen.detail() + "; lazy loading only");
        return;
      }
      RuntimeImageArtifact artifact = chosen.chosen().get();
      s.found.complete(true);
      // Page mode: content arrives page by page under its own digests, found by place on the read path.
      boolean pageMode = artifact.verify().equals(Optional.of(dev.flatpull.config.RuntimeImageSettings.Verification
          .RUNTIME_IMAGE));
      // The stream's own rate: from its first verified content in the cache to its last (lookups and waits excluded).
      long[] firstLast = {0, 0};
      RuntimeImageStream stream = stream(s, client, pageMode, firstLast);
      RuntimeImageStream.Outcome o = stream.load(artifact, s.manifest, s);
      remember(s, s.manifest.digest());
      Duration took = Duration.ofNanos(nanoTime.getAsLong() - started);
      Optional<Duration> age = artifact.traceRecorded().map(t -> Duration.between(t, clock.instant()));
      metrics.runtimeImageLookup(o.delivered() + o.reused() > 0 ? "loaded" : "stream_failed");
      metrics.runtimeImageStreamed(o, took, age);
      if (o.ignoredFrames() > 0) {
        metrics.runtimeImageLimit("frame_without_extent", o.ignoredFrames());
        LOG.warning("runtime image " + artifact.digest().shortHex() + " of " + s.reference + " has "
            + o.ignoredFrames() + " frame(s) that carry no extent: not fetched");
      }
      String line = "runtime image " + artifact.digest().shortHex() + " (service " + artifact.serviceKey() + ", "
          + chosen.detail() + ") of " + s.reference + ": " + o.delivered() + " contents (" + o.deliveredBytes()
          + " bytes) streamed in " + took.toMillis() + " ms in " + o.requests() + " request(s), " + o.reused()
          + " already on the node" + (o.incremental() ? " (only missing frames fetched)" : "")
          + rate(o.deliveredBytes(), firstLast[1] - firstLast[0])
          + (firstLast[1] > 0 ? ", done " + (firstLast[1] - s.startedNanos) / 1_000_000
              + " ms after the image's first Prepare" : "") + "; " + o.headroom();
      if (o.failure().isPresent()) {
        LOG.warning(line + "; " + o.failure().get() + ": " + o.detail() + " (the lazy loader serves the rest)");
      } else {
        LOG.info(line);
      }
      s.runtimeImage.complete(o.delivered() + o.reused() > 0);
    } catch (RuntimeImageMismatchException e) {
      fellBack(s, "mismatch", e);
    } catch (RuntimeImageLimitException e) {
      metrics.runtimeImageLimit(e.limit(), 1);
      fellBack(s, "over_limit", e);
    } catch (RuntimeImageFormatException e) {
      fellBack(s, "malformed", e);
    } catch (Exception e) {
      // Exception, not IOException and RuntimeException: the HTTP client is Kotlin and may throw checked exceptions
      // it does not declare (an interrupt at shutdown); this task must end quietly whatever it met.
      fellBack(s, "lookup_failed", e);
    } finally {
      s.found.complete(false);
      s.announced.complete(null);
      s.runtimeImage.complete(false);
    }
  }

  /**
   * A stream of a runtime image into the cache for session {@code s}: what it brings counts as served from it, is
   * landed in the kernel and, in page mode, planned by place. {@code firstLast} gets the times of its first and last
   * content, for its rate.
   */
  private RuntimeImageStream stream(ImageSession s, RegistryClient client, boolean pageMode, long[] firstLast) {
    return new RuntimeImageStream(client, cache, new ProducerProgress(settings.stall()),
          new RuntimeImageStream.Delivery() {
            @Override
            public void delivered(Digest layer, String path, long offset, int length, Digest content) {
              long now = nanoTime.getAsLong();
              if (firstLast[0] == 0) {
                firstLast[0] = now;
              }
              firstLast[1] = now;
              brought.add(content);
              threads.landing().execute(() -> land(s, layer, path, offset, length, content));
            }

            @Override
            public void announced() {
              s.announced.complete(null);
            }

            @Override
            public void planned(Digest layer, String path, long offset, int length, Digest content) {
              if (pageMode) {
                try {
                  s.pagePlanned(layer, path, offset, content);
                } catch (IOException e) {
                  // The layer's TOC could not be had: its reads go to the lazy loader.
                }
              }
            }
          }, settings.verify(), settings.limits());
  }

  /** How many other versions' listings a start without a runtime image reads, and how many of their indexes. */
  static final int BORROW_LISTINGS = 8;
  static final int BORROW_INDEXES = 3;

  private void remember(ImageSession s, Digest subject) {
    loadedSubjects.remember(repository(s), subject);
  }

  private static String repository(ImageSession s) {
    return s.reference.registry() + "/" + s.reference.repository();
  }

  /**
   * For an image without a runtime image of its own: borrows the runtime image of another version in its repository
   * that shares most with it ({@link BorrowedIndex}), and streams the frames that carry what it shares. The
   * candidates' listings and indexes are read at once and bounded in number ({@link #BORROW_LISTINGS},
   * {@link #BORROW_INDEXES}); nothing is borrowed below {@code [runtime_image] borrow_min_overlap}. Whether it
   * borrowed; false (nothing reserved, lazy loading) when no candidate was worth it.
   */
  private boolean borrow(ImageSession s, RegistryClient client, RuntimeImagePublisher publisher, long started)
      throws IOException {
    if (settings.verify() != dev.flatpull.config.RuntimeImageSettings.Verification.IMAGE) {
      return false;
    }
    List<RuntimeImagePublisher.Related> listed;
    try {
      listed = publisher.related(s.manifest.digest(), loadedSubjects.of(repository(s)),
          BORROW_LISTINGS, threads.loaders());
    } catch (IOException e) {
      // A registry that will not list the repository's tags has nothing to lend: the image found none of its own.
      LOG.info("no runtime image of another version looked for, for " + s.reference + ": " + e.getMessage());
      return false;
    }
    List<RuntimeImagePublisher.Related> related = listed.stream()
        .filter(r -> r.artifact().verify().equals(Optional.of(
            dev.flatpull.config.RuntimeImageSettings.Verification.IMAGE)))
        .limit(BORROW_INDEXES).toList();
    if (related.isEmpty()) {
      if (!listed.isEmpty()) {
        LOG.info("no runtime image of another version borrowed for " + s.reference + ": the " + listed.size()
            + " listed are page-mode runtime images, never borrowed");
      }
      return false;
    }
    // Another version has a runtime image: from here reads wait for what it will bring (one stall at most, as for the
    // image's own), so that they do not fetch lazily what the stream is about to deliver and share the link with it.
    // Should none be borrowed, the lookup's end releases them.
    s.found.complete(true);
    long[] firstLast = {0, 0};
    RuntimeImageStream stream = stream(s, client, false, firstLast);
    List<java.util.concurrent.CompletableFuture<Optional<RuntimeImageStream.Borrowable>>> reads = new ArrayList<>();
    for (RuntimeImagePublisher.Related r : related) {
      reads.add(java.util.concurrent.CompletableFuture.supplyAsync(() -> {
        try {
          return Optional.of(stream.readForBorrowing(r.artifact(), r.subject(), s.manifest, s));
        } catch (IOException | RuntimeException e) {
          LOG.info("runtime image " + r.artifact().digest().shortHex() + " of " + r.subject().shortHex()
              + " not borrowed for " + s.reference + ": " + e.getMessage());
          return Optional.empty();
        }
      }, threads.loaders()));
    }
    Optional<RuntimeImageStream.Borrowable> best = Optional.empty();
    StringBuilder considered = new StringBuilder();
    for (var f : reads) {
      Optional<RuntimeImageStream.Borrowable> b = f.join();
      if (b.isEmpty()) {
        continue;
      }
      BorrowedIndex.Rebound r = b.get().rebound();
      considered.append(String.format(java.util.Locale.ROOT, "%s%s of %s: overlap %.3f", considered.length() == 0
          ? "" : "; ", b.get().artifact().digest().shortHex(), b.get().subject().shortHex(), r.overlap()));
      if (r.keptBytes() > 0 && r.overlap() >= settings.borrowMinOverlap() && (best.isEmpty()
          || r.overlap() > best.get().rebound().overlap())) {
        best = b;
      }
    }
    if (best.isEmpty()) {
      LOG.info("no runtime image of another version borrowed for " + s.reference + " (" + (considered.length() == 0
          ? "none could be read" : considered) + "; [runtime_image] borrow_min_overlap "
          + settings.borrowMinOverlap() + ")");
      return false;
    }
    RuntimeImageStream.Borrowable b = best.get();
    long chosen = (nanoTime.getAsLong() - s.startedNanos) / 1_000_000;
    RuntimeImageStream.Outcome o = stream.borrow(b, s.manifest, s);
    Duration took = Duration.ofNanos(nanoTime.getAsLong() - started);
    metrics.runtimeImageLookup(o.delivered() + o.reused() > 0 ? "borrowed" : "stream_failed");
    metrics.runtimeImageStreamed(o, took, b.artifact().traceRecorded().map(t -> Duration.between(t, clock.instant())));
    metrics.runtimeImageBorrowed(o.deliveredBytes() + o.reusedBytes(), b.rebound().overlap());
    String line = String.format(java.util.Locale.ROOT, "runtime image %s of %s borrowed for %s (overlap %.3f: %d of"
            + " %d bytes matched, %d kept in %d of %d frames; considered %s; chosen %d ms after the image's first"
            + " Prepare): %d contents (%d bytes) streamed in %d ms in %d request(s), %d already on the node%s%s",
        b.artifact().digest().shortHex(), b.subject().shortHex(), s.reference, b.rebound().overlap(),
        b.rebound().matchedBytes(), b.rebound().extentBytes(), b.rebound().keptBytes(), b.rebound().keptFrames(),
        b.layout().index().frames().size(), considered, chosen, o.delivered(), o.deliveredBytes(), took.toMillis(),
        o.requests(), o.reused(), rate(o.deliveredBytes(), firstLast[1] - firstLast[0]),
        firstLast[1] > 0 ? ", done " + (firstLast[1] - s.startedNanos) / 1_000_000
            + " ms after the image's first Prepare" : "");
    if (o.failure().isPresent()) {
      LOG.warning(line + "; " + o.failure().get() + ": " + o.detail() + " (the lazy loader serves the rest)");
    } else {
      LOG.info(line);
    }
    s.runtimeImage.complete(o.delivered() + o.reused() > 0);
    return true;
  }

  /** The stream's rate, for the log: bytes decoded, verified and stored per second of streaming. */
  static String rate(long bytes, long nanos) {
    if (bytes <= 0 || nanos <= 0) {
      return "";
    }
    return String.format(java.util.Locale.ROOT, ", streamed at %.0f MB/s", bytes * 1e3 / nanos);
  }

  /**
   * Kernel landing: pushes arriving content into the kernel's page cache of its file (the kernel engine's
   * {@code FUSE_NOTIFY_STORE}), so that the service's reads of it, through an overlay on the layer's mount, never reach
   * this process. The file is looked up through the mount first, as the kernel must know it; a path through a
   * symbolic link is left alone (the kernel's file there is another). Content of a layer not mounted yet, or mounted
   * with libfuse, is left to the service's reads, which the page cache serves.
   */
  private void land(ImageSession s, Digest layer, String path, long offset, int length, Digest content) {
    Optional<dev.flatpull.fuse.LayerMount> m = mounts.of(s, layer);
    if (m.isEmpty()) {
      s.unlanded.computeIfAbsent(layer, l -> new java.util.concurrent.ConcurrentLinkedQueue<>())
          .add(() -> land(s, layer, path, offset, length, content));
      if (mounts.of(s, layer).isPresent()) {
        // Mounted meanwhile, perhaps after layerMounted looked.
        layerMounted(s, layer);
      }
      return;
    }
    long pages = (length + 4095L) / 4096;
    if (recording.getAsBoolean()) {
      // A page in the kernel's cache is read without a FUSE read, which the recorder would not see: a recording of an
      // image that has (or borrows) a runtime image would miss what the runtime image brought.
      return;
    }
    if (m.get().engine() != dev.flatpull.config.FuseSettings.Engine.KERNEL) {
      metrics.kernelPagesStored(0, pages);
      return;
    }
    Optional<String> relative = s.landable.computeIfAbsent(m.get().mountPoint() + "\0" + path,
        k -> landable(s, m.get().mountPoint(), path));
    if (relative.isEmpty()) {
      return;
    }
    try {
      Optional<byte[]> bytes = cache.peek(content);
      if (bytes.isEmpty() || bytes.get().length != length) {
        return;
      }
      long stored = m.get().store(relative.get(), offset, bytes.get());
      long storedPages = (stored + 4095) / 4096;
      metrics.kernelPagesStored(storedPages, Math.max(0, pages - storedPages));
      // The service's reads of these bytes never reach this process: they count as served from the runtime image
      // now, as its FUSE reads of them would have.
      metrics.contentServed("runtime_image", stored);
    } catch (IOException e) {
      // An optimisation only: the service's own read gets the content from the page cache.
      LOG.fine("kernel landing of '" + path + "' failed: " + e);
    }
  }

  /**
   * The path, relative to the mount, under which content of the runtime image's {@code path} is pushed into the kernel,
   * if it may be: it lies inside the mount and names the file itself, through no symbolic link (whose target's pages
   * the kernel keeps under another inode). Decided once per file and session ({@link ImageSession#landable}): a layer's
   * tree does not change, and a file's contents arrive one by one, each of which paid three path resolutions, through
   * the mount, for the same answer.
   */
  private Optional<String> landable(ImageSession s, Path mountPoint, String path) {
    Optional<Path> file = landingPath(mountPoint, path);
    if (file.isEmpty()) {
      LOG.warning("runtime image of " + s.reference + " names '" + path + "' for kernel landing, which does not lie"
          + " inside the layer's mount " + mountPoint + ": not stored");
      return Optional.empty();
    }
    String relative = path.replaceFirst("^/+", "");
    try {
      return file.get().equals(mountPoint.toRealPath().resolve(relative).normalize()) ? Optional.of(relative)
          : Optional.empty();
    } catch (IOException e) {
      return Optional.empty();
    }
  }

  /** A layer of {@code s} is mounted: content of it that arrived before is pushed into the kernel now. */
  void layerMounted(ImageSession s, Digest layer) {
    java.util.Queue<Runnable> waiting = s.unlanded.get(layer);
    if (waiting == null) {
      return;
    }
    for (Runnable r; (r = waiting.poll()) != null; ) {
      threads.landing().execute(r);
    }
  }

  /**
   * The file a runtime image's {@code path} names inside a layer's mount, if it is one: the path comes from an artifact
   * anyone who can push to the repository may publish, and the manager reads it as root. Leading slashes go (an index
   * path is relative to the layer), and the result, symbolic links resolved (the layer's own, which the mount shows),
   * must lie inside the mount: {@code //etc/passwd}, {@code ../..} and links out of the layer are refused.
   */
  static Optional<Path> landingPath(Path mountPoint, String path) {
    String relative = path;
    while (relative.startsWith("/")) {
      relative = relative.substring(1);
    }
    try {
      Path root = mountPoint.toRealPath();
      Path p = root.resolve(relative).normalize();
      if (relative.isEmpty() || !p.startsWith(root) || !p.toRealPath().startsWith(root)) {
        return Optional.empty();
      }
      return Optional.of(p);
    } catch (IOException | java.nio.file.InvalidPathException e) {
      return Optional.empty();
    }
  }

  private void fellBack(ImageSession s, String reason, Exception e) {
    metrics.runtimeImageLookup(reason);
    LOG.warning("not using a runtime image for " + s.reference + " (" + reason + "): " + e.getMessage()
        + "; lazy loading only");
  }

  /**
   * Waits for the image's runtime image to reserve what it will bring, once the lookup found one: one stall at most,
   * for the whole image (once a read gave up waiting, later reads do not wait, so a stream held back costs a start one
   * stall, not one per read). While the lookup is still on its way a read does not wait: it goes to the lazy loader,
   * and the stream leaves what that read fetched alone.
   */
  void awaitAnnounced(ImageSession s) throws java.io.InterruptedIOException {
    if (s.announced.isDone() || s.announcementLate || !s.found.getNow(false)) {
      return;
    }
    try {
      s.announced.get(settings.stall().toMillis(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("interrupted waiting for the runtime image's index");
    } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
      if (!s.announcementLate) {
        LOG.info("reads of " + s.reference + " no longer wait for its runtime image: it announced nothing within "
            + settings.stall().toMillis() + " ms ([runtime_image] stall)");
      }
      s.announcementLate = true;
    }
  }

  /**
   * Narrows the mount's readahead, as recording did, while the image may be starting from a runtime image: until the
   * lookup finds none, else for the start-up window.
   */
  void narrowWhileStarting(ImageSession s, Path mountPoint, ReadaheadKnobs readahead) {
    if (!settings.load()) {
      return;
    }
    List<String> notes = readahead.narrowReadahead(List.of(mountPoint));
    if (!notes.isEmpty()) {
      LOG.info("start-up readahead: " + String.join("; ", notes));
    }
    s.runtimeImage.thenAccept(loaded -> {
      if (loaded) {
        threads.timer().schedule(readahead::restore, settings.startupWindow().toMillis(), TimeUnit.MILLISECONDS);
      } else {
        readahead.restore();
      }
    });
  }
}
