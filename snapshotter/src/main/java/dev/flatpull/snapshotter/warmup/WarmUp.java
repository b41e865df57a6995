package dev.flatpull.snapshotter.warmup;

import static dev.flatpull.fetcher.tar.TarWriter.writeEntry;

import com.fasterxml.jackson.core.util.DefaultIndenter;
import com.fasterxml.jackson.core.util.DefaultPrettyPrinter;
import com.fasterxml.jackson.core.util.Separators;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectWriter;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.ConfigException;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Digest;
import dev.flatpull.endpoints.grpc.UnixSockets;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.manager.FuseManagerService;
import dev.flatpull.manager.LayerServer;
import dev.flatpull.manager.RemoteLayerMetrics;
import dev.flatpull.manager.client.FuseManagerClient;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.runtimeimage.ImageBinding;
import dev.flatpull.runtimeimage.RuntimeImageBuilder;
import dev.flatpull.runtimeimage.RuntimeImageDecoder;
import dev.flatpull.runtimeimage.RuntimeImageFormat;
import dev.flatpull.runtimeimage.RuntimeImagePublisher;
import dev.flatpull.runtimeimage.RuntimeImageSelection;
import dev.flatpull.runtimeimage.RuntimeImageStream;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import io.grpc.Server;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.BooleanSupplier;
import java.util.function.LongSupplier;
import java.util.logging.Logger;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;

/**
 * Runs a remote layer's whole cold path once on a synthetic image, so that a node's first remote Prepare is as fast as
 * its later ones. On a fresh JVM, opening the Debian + python3 layer's TOC took about 650 ms (the transfer is under
 * 100 ms at 200 Mbit/s; the rest was gunzip, hashing and JSON parsing not yet compiled), the first mount paid about
 * 180 ms for binding libfuse, and the first registry request about 160 ms for loading the HTTP client (a manifest
 * took 170 ms on loopback, later ones 8 ms). Here an image of a few thousand files (some of many chunks) is written in
 * both lazy formats and served by a {@link LoopbackRegistry}; a real registry client (its own, counted nowhere)
 * resolves it and opens each layer's TOC over HTTP, three times, then parses the TOCs from memory until compiled;
 * then one layer is mounted and files are read through it (a throwaway page cache, so nothing synthetic reaches the
 * host's cache). Everything lives under {@code dir} and is deleted afterwards.
 */

public final class WarmUp {
  private static final Logger LOG = Logger.getLogger(WarmUp.class.getName());
  // A generated layer, shaped after no particular image: enough entries of every kind for the JIT compiler to see
  // each of the parser's and tree builder's paths thousands of times.
  private static final int FILES = 4000;
  // Files of several chunks each: a lazily pulled layer's TOC is mostly chunk entries, whose parsing stays slow until
  // compiled.
  private static final int LARGE_FILES = 300;
  // Parsing is what needs many rounds before the JIT compiler has finished with it: rounds go on until one is no
  // faster than the best before it (the code is compiled), between these bounds.
  private static final int MIN_PARSE_ROUNDS = 3;
  private static final int MAX_PARSE_ROUNDS = 20;
  private static final int MOUNT_ROUNDS = 3;
  public static final String REPOSITORY = "flatpull/warm-up";
  private static final ObjectMapper JSON = new ObjectMapper();
  // stargz-snapshotter's estargz.TOCEntry, in its order; its writer marshals the TOC indented with tabs.
  private static final List<String> GO_FIELDS = List.of("name", "type", "size", "modtime", "linkName", "mode", "uid",
      "gid", "userName", "groupName", "offset", "devMajor", "devMinor", "xattrs", "digest", "chunkOffset", "chunkSize",
      "chunkDigest");
  private static final ObjectWriter GO_INDENT = JSON.writer(
      new DefaultPrettyPrinter()
          .withObjectIndenter(new DefaultIndenter("\t", "\n"))
          .withArrayIndenter(new DefaultIndenter("\t", "\n"))
          .withSeparators(Separators.createDefaultInstance()
              .withObjectFieldValueSpacing(Separators.Spacing.AFTER)));

  private WarmUp() {}

  /**
   * The FUSE manager's warm-up, run while it serves, when {@code [snapshotter] warm_up} asks for it: the service the
   * daemon calls ({@link #service}), then the TOC parser and read path ({@link #run}), under {@code ROOT}, until done
   * or until {@code asked} says a layer was asked for: then it stops at its next step, so that a node's first pull
   * waits neither for the warm-up (5-9 s, which a node that had just booted waited whole before the manager served)
   * nor behind it for the CPU. A failure is logged, never fatal (the first remote Prepare is then slower).
   *
   * @param version the version the service reports
   */
  public static void whileServing(FlatpullConfig config, String version, BooleanSupplier asked) {
    // The real service is serving already: it loaded gRPC's Netty classes, one of which extends ArrayList, and
    // loading that threw away every method the JIT compiler had compiled on the premise that ArrayList has no
    // subclass, the TOC parser's among them (the JIT's log: "dependency_failed leaf_type java/util/ArrayList"), so
    // that a node's first real TOC was parsed by code compiled for profiling. Nothing compiled here is lost so.
    Steps steps = () -> {
      service(config.root().resolve("warm-up-service"), version, System::nanoTime, InstantSource.system(), asked);
      run(config.root().resolve("warm-up"), InstantSource.system(), asked);
      unlessAsked(asked);
      collect();
    };
    long started = System.nanoTime();
    try {
      ifAskedFor(config, "the remote-layer path", steps);
    } catch (Stopped stopped) {
      LOG.info(String.format("warm-up stopped after %.0f ms: a layer was asked for", (System.nanoTime() - started)
          / 1e6));
    }
  }

  /**
   * Collects what the warm-up left, while the node is idle: a cold start allocates about 100 MB in the FUSE manager,
   * which the young generation its options size holds without a pause only if it begins empty. The warm-up's garbage
   * filled it to a level that depended on what the warm-up did, and a collection fell inside the first start, or not,
   * by that level: when the warm-up came to stream a runtime image, one did in most first starts (4-15 ms paused, the
   * TOC's parse on the two cores beside it).
   */
  private static void collect() {
    long started = System.nanoTime();
    System.gc();
    LOG.info(String.format("warm-up's garbage collected in %.0f ms", (System.nanoTime() - started) / 1e6));
  }

  /** A warm-up that stopped because a real layer was asked for. */
  private static final class Stopped extends RuntimeException {
    Stopped() {
      super("a layer was asked for", null, false, false);
    }
  }

  private static void unlessAsked(BooleanSupplier asked) {
    if (asked.getAsBoolean()) {
      throw new Stopped();
    }
  }

  /** A process's warm-up. */
  @FunctionalInterface
  interface Steps {
    void run() throws IOException;
  }

  /**
   * Runs {@code steps} when {@code [snapshotter] warm_up} asks for it and logs how long they took; a failure is logged,
   * never thrown: the process serves all the same, its first remote Prepare slower.
   */
  static void ifAskedFor(FlatpullConfig config, String what, Steps steps) {
    if (!config.snapshotter().warmUp()) {
      return;
    }
    long started = System.nanoTime();
    try {
      steps.run();
      LOG.info(String.format("warmed up %s in %.0f ms", what, (System.nanoTime() - started) / 1e6));
    } catch (Stopped stopped) {
      throw stopped;
    } catch (IOException | RuntimeException e) {
      LOG.warning("warm-up failed (the first remote Prepare will be slower): " + e);
    }
  }

  /**
   * The FUSE manager's cold path: resolve, the runtime-image lookup, TOCs of both formats, tree, mount, reads.
   *
   * @param clock the wall clock the runtime-image lookup's retries read
   */
  public static void run(Path dir, InstantSource clock) throws IOException {
    run(dir, clock, () -> false);
  }

  /** {@link #run(Path, InstantSource)}, stopping at its next step once {@code asked} is true. */
  static void run(Path dir, InstantSource clock, BooleanSupplier asked) throws IOException {
    Files.createDirectories(dir);
    try (LoopbackRegistry registry = LoopbackRegistry.start()) {
      List<Layer> blobs = syntheticLayers(dir);
      serveImage(registry, blobs);
      FlatpullConfig config = config(dir);
      ImageReference ref = ImageReference.parse(registry.address() + "/" + REPOSITORY + ":latest");
      try (RegistryClients clients = RegistryClients.create(config, FetchListener.NONE)) {
        RegistryClient client = clients.client(ref);
        LazyLayer last = null;
        List<Descriptor> layers = List.of();
        ImageManifest manifest = null;
        for (int round = 0; round < 3; round++) {
          unlessAsked(asked);
          manifest = client.resolve(ref, Platform.current()).manifest();
          layers = manifest.layers();
          // The lookup runs beside an image's first TOC: cold, its class loading slowed that TOC down (313 ms against
          // 196 ms for a later mount of the same layer, 2 cores). The synthetic image has none: both ways answer 404.
          RuntimeImageSelection.of(RuntimeImagePublisher.of(client, clock).list(manifest.digest()),
              config.runtimeImage());
          for (Descriptor d : layers) {
            last = new LayerOpener(client, config, dir.resolve("work")).open(d);
            LayerTree.of(last.index());
          }
        }
        List<Layer> parsed = new ArrayList<>(blobs);
        // A layer of tens or hundreds of megabytes has offsets of 8 and 9 digits: digit counts the parser never saw
        // threw its compiled number parsing away at the first real TOC.
        parsed.add(shifted(blobs.get(0), 10_000_000L));
        parsed.add(shifted(blobs.get(0), 100_000_000L));
        long best = Long.MAX_VALUE;
        for (int round = 0; round < MAX_PARSE_ROUNDS; round++) {
          unlessAsked(asked);
          long started = System.nanoTime();
          for (Layer l : parsed) {
            LayerTree.of(LayerFormat.of(l.descriptor()).readToc(l.descriptor(), l.reader(), config.limits()));
          }
          long took = System.nanoTime() - started;
          if (round >= MIN_PARSE_ROUNDS && took >= best) {
            break;
          }
          best = Math.min(best, took);
        }
        unlessAsked(asked);
        runtimeImage(client, config, manifest, clock, dir.resolve("work"));
        // Mounted more than once: the first real mount after a single one still took 1.4x a later one (tree and
        // mount, 37 ms against 27 ms, in the cold-start benchmark).
        for (int round = 0; round < MOUNT_ROUNDS; round++) {
          unlessAsked(asked);
          try (PageCache cache = PageCache.open(dir.resolve("cache-" + round),
              new CacheSettings(Optional.empty(), 8L << 20, 64L << 20, CacheSettings.DEFAULTS.reservationWait()));
              LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(last.index()),
                  new LayerContentReader(last, cache), FuseEvents.NONE), dir.resolve("mount-" + round))) {
            Files.readAllBytes(m.mountPoint().resolve(name(7 + 10 * round)));
            Files.readAllBytes(m.mountPoint().resolve("usr/share/warm/large" + (3 + round)));
          }
        }
      }
    } catch (ConfigException e) {
      throw new IOException(e);
    } finally {
      deleteTree(dir);
    }
  }

  /** Rounds of decoding the synthetic image's runtime image. */
  private static final int RUNTIME_IMAGE_ROUNDS = 5;

  /**
   * A cold start's runtime-image path, which nothing else here compiles: a runtime image of the synthetic image built
   * from a trace of the first pages of some of its files, then its index read, bound to the TOCs and every frame
   * decoded and verified, a few times.
   */
  private static void runtimeImage(RegistryClient client, FlatpullConfig config, ImageManifest manifest,
      InstantSource clock, Path work) throws IOException {
    LayerOpener opener = new LayerOpener(client, config, work);
    Map<Digest, LayerIndex> indexes = new LinkedHashMap<>();
    for (Descriptor d : manifest.layers()) {
      indexes.put(d.digest(), opener.open(d).index());
    }
    RuntimeImageBuilder.Built built = new RuntimeImageBuilder(config.runtimeImage(), clock, "warm-up", line -> {})
        .build(trace(manifest, indexes, 400, 4, 1, clock), manifest, opener::open);
    for (int round = 0; round < RUNTIME_IMAGE_ROUNDS; round++) {
      RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(built.blob());
      RuntimeImageDecoder.decode(layout, built.blob(), ImageBinding.bind(layout.index(), manifest, indexes),
          (l, e, content) -> {});
    }
  }

  /**
   * A trace of {@code manifest}'s start that read the first {@code pages} pages (all of them with
   * {@code Integer.MAX_VALUE}) of every {@code every}-th regular file of each layer, at most {@code files} of them,
   * one after another.
   */
  private static Trace trace(ImageManifest manifest, Map<Digest, LayerIndex> indexes, int files, int pages,
      int every, InstantSource clock) {
    List<LayerTrace> traced = new ArrayList<>();
    for (Map.Entry<Digest, LayerIndex> layer : indexes.entrySet()) {
      List<String> names = new ArrayList<>();
      List<PageRun> runs = new ArrayList<>();
      int regular = 0;
      for (LayerEntry e : layer.getValue().entries()) {
        if (e.type() == EntryType.REG && e.size() > 0 && regular++ % every == 0 && names.size() < files) {
          int read = (int) Math.min(pages, (e.size() + LayerTrace.PAGE_SIZE - 1) / LayerTrace.PAGE_SIZE);
          runs.add(new PageRun(names.size(), 0, read, 10L * runs.size(), 1));
          names.add("/" + e.name());
        }
      }
      traced.add(new LayerTrace(layer.getKey().toString(), names, runs));
    }
    return new Trace(new ServiceVersion(REPOSITORY + ":latest", manifest.digest().toString(),
        Platform.current().toString(), List.of("warm-up"), List.of(), "", List.of("exit")), "warm-up", clock.instant(),
        List.of(1L), traced);
  }

  /**
   * A synthetic one-layer eStargz image on a loopback registry, and a registry client (counted nowhere) for it.
   *
   * @param inheritedLabels the layer's annotations containerd passes to a Prepare as labels (its TOC's digest and tail)
   */
  public record TinyImage(RegistryClients clients, ImageReference ref, Digest layer,
      Map<String, String> inheritedLabels) {}

  /** What runs while a {@link TinyImage} is served. */
  @FunctionalInterface
  public interface WithTinyImage {
    void run(TinyImage image) throws IOException;
  }

  /** Serves a {@link TinyImage} under {@code dir} while {@code use} runs; deletes {@code dir} afterwards. */
  public static void withTinyImage(Path dir, WithTinyImage use) throws IOException {
    Files.createDirectories(dir);
    try (LoopbackRegistry registry = LoopbackRegistry.start()) {
      InMemoryLayer tiny = InMemoryLayer.write(
          new LazyLayerWriter(LayerFormat.ESTARGZ, LazyLayerWriter.DEFAULT_CHUNK_SIZE, 1), tar(dir, 10, 0), List.of());
      serveImage(registry, List.of(new Layer(tiny.descriptor(), tiny.blob())));
      ImageReference ref = ImageReference.parse(registry.address() + "/" + REPOSITORY + ":latest");
      try (RegistryClients clients = RegistryClients.create(config(dir), FetchListener.NONE)) {
        Map<String, String> inherited = new HashMap<>();
        tiny.descriptor().annotations().forEach((k, v) -> {
          if (k.startsWith("containerd.io/snapshot/")) {
            inherited.put(k, v);
          }
        });
        use.run(new TinyImage(clients, ref, tiny.descriptor().digest(), Map.copyOf(inherited)));
      }
    } catch (ConfigException e) {
      throw new IOException(e);
    } finally {
      deleteTree(dir);
    }
  }

  /**
   * The FUSE manager's service path as the daemon calls it, on a throwaway {@link LayerServer} (its own registry client
   * counted nowhere, page cache, threads and metrics) behind the real gRPC service on a socket of its own: status, the
   * mount of a layer with its image's manifest, which starts the image's session, finds the image's runtime image and
   * streams it into the page cache and the kernel's, its files read through the mount, unmount and an emptied cache;
   * three times. Cold, the mount request of a node's first remote Prepare spent about 50 ms on its way through the gRPC
   * service (2 ms link), besides the TOC itself; and a start from a runtime image, which streams and lands a thousand
   * contents or more, compiled that path as it ran: the compiler's thread took 85-171 ms of the manager's CPU inside
   * the start, the page cache's memory tier and the stream's and landing's code first among what it compiled.
   */
  public static Streamed service(Path dir, String version, LongSupplier nanoTime, InstantSource clock)
      throws IOException {
    return service(dir, version, nanoTime, clock, () -> false);
  }

  /**
   * What the service warm-up's runtime image brought, over its rounds.
   *
   * @param rounds the rounds run
   * @param contents contents each round's stream delivered, verified, into the page cache
   * @param kernelPages pages pushed into the kernel's page cache (kernel landing)
   */
  public record Streamed(int rounds, List<Long> contents, long kernelPages) {
    public Streamed {
      contents = List.copyOf(contents);
    }
  }

  /** The throwaway server's metrics: each stream's outcome, and the pages landed in the kernel. */
  private static final class StreamWatch implements RemoteLayerMetrics {
    final java.util.concurrent.BlockingQueue<RuntimeImageStream.Outcome> streams =
        new java.util.concurrent.LinkedBlockingQueue<>();
    final java.util.concurrent.atomic.AtomicLong kernelPages = new java.util.concurrent.atomic.AtomicLong();
    private volatile String lookup = "none yet";

    @Override
    public void runtimeImageLookup(String result) {
      lookup = result;
    }

    @Override
    public void runtimeImageStreamed(RuntimeImageStream.Outcome outcome, java.time.Duration took,
        Optional<java.time.Duration> traceAge) {
      streams.add(outcome);
    }

    @Override
    public void kernelPagesStored(long stored, long missed) {
      kernelPages.addAndGet(stored);
    }

    /** The next stream's outcome; a stream that did not end within {@code seconds}, or failed, fails the warm-up. */
    RuntimeImageStream.Outcome next(int seconds) throws IOException {
      RuntimeImageStream.Outcome o;
      try {
        o = streams.poll(seconds, java.util.concurrent.TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new java.io.InterruptedIOException("interrupted waiting for the warm-up's runtime image");
      }
      if (o == null) {
        throw new IOException("the warm-up's runtime image was not streamed within " + seconds + " s (lookup: "
            + lookup + ")");
      }
      if (o.failure().isPresent()) {
        throw new IOException("the warm-up's runtime image failed: " + o.failure().get() + ": " + o.detail());
      }
      return o;
    }
  }

  /** The service warm-up's image: enough files that each of a start's per-content paths runs hundreds of times. */
  private static final int SERVICE_FILES = 1200;
  private static final int SERVICE_LARGE_FILES = 60;

  private static Streamed service(Path dir, String version, LongSupplier nanoTime, InstantSource clock,
      BooleanSupplier asked) throws IOException {
    Files.createDirectories(dir);
    try (LoopbackRegistry registry = LoopbackRegistry.start()) {
      Path imageDir = Files.createDirectories(dir.resolve("image"));
      InMemoryLayer layer = InMemoryLayer.write(new LazyLayerWriter(LayerFormat.ESTARGZ,
          LazyLayerWriter.DEFAULT_CHUNK_SIZE, 1), tar(imageDir, SERVICE_FILES, SERVICE_LARGE_FILES), List.of());
      serveImage(registry, List.of(new Layer(layer.descriptor(), layer.blob())));
      ImageReference ref = ImageReference.parse(registry.address() + "/" + REPOSITORY + ":latest");
      FlatpullConfig config = config(dir.resolve("root"));
      ImageManifest manifest;
      List<String> files = new ArrayList<>();
      // Its own clients for the image and its runtime image; the throwaway server's are its own, closed with it.
      try (RegistryClients publishing = RegistryClients.create(config(imageDir), FetchListener.NONE)) {
        RegistryClient client = publishing.client(ref);
        manifest = client.resolve(ref, Platform.current()).manifest();
        LayerOpener opener = new LayerOpener(client, config, imageDir.resolve("work"));
        Map<Digest, LayerIndex> indexes = Map.of(layer.descriptor().digest(), opener.open(layer.descriptor()).index());
        // Half of the files, whole: a runtime image is a start's working set, never the whole image
        // ([runtime_image] max_share).
        Trace trace = trace(manifest, indexes, Integer.MAX_VALUE, Integer.MAX_VALUE, 2, clock);
        trace.layers().forEach(t -> files.addAll(t.files()));
        RuntimeImageBuilder.Built built = new RuntimeImageBuilder(config.runtimeImage(), clock, "warm-up", line -> {})
            .build(trace, manifest, opener::open);
        RuntimeImagePublisher.of(client, clock).push(built.index(), built.blob(), new Descriptor(
            MediaTypes.OCI_MANIFEST, manifest.digest(), manifest.raw().length, Map.of()));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new java.io.InterruptedIOException("interrupted publishing the warm-up's runtime image");
      }
      String pinned = ref.withDigest(manifest.digest()).toString();
      String layerJson = OciDocuments.writeDescriptor(manifest.layers().get(0));
      RegistryClients clients = RegistryClients.create(config, FetchListener.NONE);
      StreamWatch watch = new StreamWatch();
      List<Long> contents = new ArrayList<>();
      LayerServer server = new LayerServer(config, clients, new FetchStatistics(),
          PageCache.open(dir.resolve("cache"), new CacheSettings(Optional.empty(), 8L << 20, 64L << 20,
              CacheSettings.DEFAULTS.reservationWait())), watch, nanoTime, clock, LayerServer.Threads.create());
      Path socket = dir.resolve("manager.sock");
      Server grpc = null;
      FuseManagerClient client = new FuseManagerClient(socket, List.of(), dir.resolve("manager.log"));
      try {
        grpc = UnixSockets.serve(socket, new FuseManagerService(server, config.root(), version));
        for (int round = 0; round < 3; round++) {
          unlessAsked(asked);
          client.status(10);
          // Inside the manager's root: it refuses mount points anywhere else.
          Path mountPoint = Files.createDirectories(config.root().resolve("mount-" + round));
          client.mount(mountPoint, pinned, layerJson, Optional.of(manifest));
          // The stream first, whole: a read before the lookup found it would go to the lazy loader, and the stream
          // would leave what that read fetched alone. Then the service's reads, of content on the node.
          contents.add(watch.next(10).delivered());
          for (String f : files) {
            Files.readAllBytes(mountPoint.resolve(f.substring(1)));
          }
          client.unmount(mountPoint);
          // So that the next round's stream brings everything again.
          server.emptyCache();
        }
        return new Streamed(contents.size(), contents, watch.kernelPages.get());
      } finally {
        client.close();
        if (grpc != null) {
          UnixSockets.stop(grpc);
        }
        server.close();
      }
    } catch (ConfigException e) {
      throw new IOException(e);
    } finally {
      deleteTree(dir);
    }
  }

  /**
   * A blob as the TOC reader sees it: {@code blob} holds its bytes from {@code at} on (its tail, for a shifted layer);
   * nothing before {@code at} is ever read.
   */
  public record Layer(Descriptor descriptor, byte[] blob, long at) {
    Layer(Descriptor descriptor, byte[] blob) {
      this(descriptor, blob, 0);
    }

    BlobReader reader() {
      return range -> Arrays.copyOfRange(blob, (int) (range.offset() - at), (int) (range.end() - at));
    }
  }

  /**
   * {@code estargz} with its TOC's offsets {@code shift} bytes further on, as the tail of a blob that much larger (its
   * data never read): a TOC with the large numbers of a real layer, without writing one, and in the form
   * stargz-snapshotter's writer gives it ({@link #goEntry}, indented), the form most eStargz layers arrive in.
   */
  static Layer shifted(Layer estargz, long shift) throws IOException {
    Descriptor d = estargz.descriptor();
    long tocOffset = Long.parseLong(d.annotation(LayerFormat.ESTARGZ_TOC_OFFSET).orElseThrow());
    ObjectNode toc = (ObjectNode) JSON.readTree(tocJson(estargz));
    ObjectNode go = JSON.createObjectNode().put("version", 1);
    ArrayNode entries = go.putArray("entries");
    for (var e : toc.withArray("entries")) {
      if (e.has("offset")) {
        ((ObjectNode) e).put("offset", e.get("offset").asLong() + shift);
      }
      entries.add(goEntry((ObjectNode) e));
    }
    byte[] json = GO_INDENT.writeValueAsBytes(go);
    ByteArrayOutputStream tail = new ByteArrayOutputStream();
    try (var gz = new GZIPOutputStream(tail)) {
      TarWriter.writeEntry(gz, TarHeader.regular(EstargzToc.TOC_NAME, json.length, 0644, Instant.EPOCH), json);
      TarWriter.writeEnd(gz);
    }
    tail.writeBytes(EstargzToc.footer(tocOffset + shift));
    byte[] bytes = tail.toByteArray();
    Map<String, String> annotations = new HashMap<>(d.annotations());
    annotations.put(LayerFormat.ESTARGZ_TOC_DIGEST, Digest.sha256(json).toString());
    annotations.put(LayerFormat.ESTARGZ_TOC_OFFSET, Long.toString(tocOffset + shift));
    annotations.remove(LayerFormat.ESTARGZ_TAIL_LABEL);
    return new Layer(new Descriptor(d.mediaType(), d.digest(), tocOffset + shift + bytes.length, annotations), bytes,
        tocOffset + shift);
  }

  /** The TOC's JSON of an eStargz {@code layer}: the one tar entry of the gzip member between its TOC and footer. */
  static byte[] tocJson(Layer layer) throws IOException {
    int start = (int) (Long.parseLong(layer.descriptor().annotation(LayerFormat.ESTARGZ_TOC_OFFSET).orElseThrow())
        - layer.at());
    byte[] blob = layer.blob();
    try (var in = new GZIPInputStream(new ByteArrayInputStream(blob, start,
        blob.length - EstargzToc.FOOTER_SIZE - start))) {
      byte[] member = in.readAllBytes();
      long size = Long.parseLong(new String(member, 124, 11, StandardCharsets.US_ASCII).trim(), 8);
      return Arrays.copyOfRange(member, 512, 512 + (int) size);
    }
  }

  /**
   * {@code e} as stargz-snapshotter's Go writer (ctr-remote) has it: its struct's field order, zero values left out
   * (uid and gid 0 are absent, not 0). The parser compiled on our own writer's entries alone met absent owners at the
   * first real TOC and ran interpreted again.
   */
  private static ObjectNode goEntry(ObjectNode e) {
    ObjectNode out = JSON.createObjectNode();
    for (String field : GO_FIELDS) {
      var v = e.get(field);
      boolean empty = v == null || (v.isNumber() && v.asLong() == 0) || (v.isTextual() && v.asText().isEmpty())
          || (v.isObject() && v.isEmpty());
      if (!empty || field.equals("name") || field.equals("type")) {
        out.set(field, v);
      }
    }
    e.fields().forEachRemaining(f -> {
      if (!out.has(f.getKey()) && !GO_FIELDS.contains(f.getKey())) {
        out.set(f.getKey(), f.getValue());
      }
    });
    return out;
  }

  public static FlatpullConfig config(Path dir) throws ConfigException {
    // No hosts.toml: a node's _default mirror must not receive the loopback registry's requests.
    return FlatpullConfig.parse("warm-up", "root = \"" + dir + "\"\n[registry]\nplain_http = true\n"
        + "config_path = \"\"\nmax_attempts = 1\nconnect_timeout = \"2s\"\nread_timeout = \"10s\"\n");
  }

  /** A layer of {@code FILES} small files and {@code LARGE_FILES} of many chunks, in both lazy formats. */
  public static List<Layer> syntheticLayers(Path dir) throws IOException {
    Path tar = tar(dir, FILES, LARGE_FILES);
    List<Layer> out = new ArrayList<>();
    for (LayerFormat format : List.of(LayerFormat.ESTARGZ, LayerFormat.ZSTD_CHUNKED)) {
      InMemoryLayer l = InMemoryLayer.write(new LazyLayerWriter(format, LazyLayerWriter.DEFAULT_CHUNK_SIZE, 1), tar,
          List.of());
      out.add(new Layer(l.descriptor(), l.blob()));
    }
    return out;
  }

  /**
   * A layer as varied as a distribution's: directories, symbolic and hard links, a device, extended attributes,
   * several owners, modes and modification times, long names. The parser's compiled code is only as good as the
   * profile it was compiled with: on a warm-up of regular files alone, the first real TOC threw the compiled parser,
   * tree builder and JSON name lookup away and ran interpreted again (424 ms against 100-170 later, measured on a
   * Debian layer).
   */
  private static Path tar(Path dir, int files, int largeFiles) throws IOException {
    Path tar = dir.resolve("warm-up-" + files + ".tar");
    try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(tar))) {
      // A distribution's shape, as tar writes it: the root itself, "./" before names, every parent listed, top-level
      // names and links (a merged /usr), dot files, empty files.
      writeEntry(out, new TarHeader("./", TarHeader.DIR, 0, 0755, 0, 0, "root", "root", time(1), "", 0, 0,
          Map.of()), new byte[0]);
      for (String parent : List.of("etc/", "usr/", "usr/lib/", "usr/lib/warm/", "usr/share/")) {
        writeEntry(out, new TarHeader(parent, TarHeader.DIR, 0, 0755, 0, 0, "root", "root", time(parent.length()), "",
            0, 0, Map.of()), new byte[0]);
      }
      for (String link : List.of("bin", "lib", "lib64", "sbin")) {
        writeEntry(out, new TarHeader(link, TarHeader.SYMLINK, 0, 0777, 0, 0, "root", "root", time(link.length()),
            "usr/" + link, 0, 0, Map.of()), new byte[0]);
      }
      for (String dot : List.of("etc/.pwd.lock", "etc/a", "etc/hostname", "etc/.wh..wh..opq")) {
        byte[] content = dot.getBytes(StandardCharsets.UTF_8);
        writeEntry(out, new TarHeader(dot, TarHeader.REG, content.length, 0600, 0, 0, "root", "root",
            time(dot.length()), "", 0, 0, Map.of()), content);
      }
      for (int d = 0; d < 40; d++) {
        writeEntry(out, new TarHeader("usr/lib/warm/" + d + "/", TarHeader.DIR, 0, 0755, 0, 0, "root", "root",
            time(d), "", 0, 0, Map.of()), new byte[0]);
      }
      writeEntry(out, new TarHeader("usr/share/warm/", TarHeader.DIR, 0, 0755, 0, 0, "root", "root", time(0), "", 0, 0,
          Map.of()), new byte[0]);
      for (int i = 0; i < files; i++) {
        String name = tarName(i);
        if (i % 10 == 9) {
          writeEntry(out, new TarHeader(name, TarHeader.SYMLINK, 0, 0777, 0, 0, "root", "root", time(i), "f" + (i - 1)
              + ".conf", 0, 0, Map.of()), new byte[0]);
        } else if (i % 50 == 48) {
          // To the file before it (never a link: i - 1 ends in 7).
          writeEntry(out, new TarHeader(name, TarHeader.HARDLINK, 0, 0644, 0, 0, "root", "root", time(i),
              tarName(i - 1), 0, 0, Map.of()), new byte[0]);
        } else {
          byte[] content = i % 13 == 5 ? new byte[0] : ("warm-up " + i + "\n").repeat(1 + i % 7).getBytes();
          writeEntry(out, new TarHeader(name, TarHeader.REG, content.length, i % 4 == 0 ? 0755 : 0644, i % 7 == 0 ? 1000
              : 0, i % 7 == 0 ? 1000 : 0, i % 7 == 0 ? "" : "root", i % 7 == 0 ? "" : "root", time(i), "", 0, 0,
              i % 100 == 0 ? Map.of("user.warm-up", new byte[] {1, 2}) : Map.of()), content);
        }
      }
      // The device nodes debootstrap leaves in /dev: a minor (or major) number 0 ends its JSON object with a zero,
      // which the parser's number code had not met ("devMinor":0}).
      writeEntry(out, new TarHeader("dev/", TarHeader.DIR, 0, 0755, 0, 0, "root", "root", time(2), "", 0, 0, Map.of()),
          new byte[0]);
      int[][] devices = {{1, 3}, {1, 5}, {5, 0}, {5, 2}, {0, 0}, {7, 0}};
      for (int d = 0; d < devices.length; d++) {
        writeEntry(out, new TarHeader("dev/n" + d, d == 5 ? TarHeader.BLOCK : TarHeader.CHAR, 0, 0666, 0, 0, "root",
            "root", time(d), "", devices[d][0], devices[d][1], Map.of()), new byte[0]);
      }
      writeEntry(out, new TarHeader("dev/fifo", TarHeader.FIFO, 0, 0644, 0, 0, "root", "root", time(3), "", 0, 0,
          Map.of()), new byte[0]);
      for (int i = 0; i < largeFiles; i++) {
        byte[] content = ("large warm-up file " + i + " line\n").repeat(2300).getBytes();
        writeEntry(out, new TarHeader("usr/share/warm/large" + i, TarHeader.REG, content.length, 0644, 0, 0, "root",
            "root", time(i), "", 0, 0, Map.of()), content);
      }
      TarWriter.writeEnd(out);
    }
    return tar;
  }

  /** {@link #name} as a tar often has it: every third with "./" before it. */
  private static String tarName(int i) {
    return (i % 3 == 1 ? "./" : "") + name(i);
  }

  private static String name(int i) {
    return "usr/lib/warm/" + (i % 40) + "/" + (i % 3 == 0 ? "lib-with-a-longer-name-" : "f") + i
        + (i % 5 == 0 ? ".x86_64-linux-gnu.so.1" : i % 5 == 1 ? "" : ".conf");
  }

  /** Times across a century, leap days and all: a real layer's dates ran date code the warm-up had not. */
  private static Instant time(int i) {
    return Instant.ofEpochSecond(86_400L * ((i * 7_919L) % 36_500) + (i * 3_637L) % 86_400);
  }

  /** Serves {@code layers} as one image, {@code REPOSITORY:latest}, with an empty config. */
  public static void serveImage(LoopbackRegistry registry, List<Layer> layers) {
    byte[] config = "{}".getBytes(StandardCharsets.UTF_8);
    Descriptor c = new Descriptor(MediaTypes.OCI_CONFIG, registry.content().putBlob(config), config.length, Map.of());
    for (Layer l : layers) {
      registry.content().putBlob(l.blob());
    }
    registry.content().putManifest("latest", MediaTypes.OCI_MANIFEST, OciDocuments.writeManifest(
        MediaTypes.OCI_MANIFEST, c, layers.stream().map(Layer::descriptor).toList(), Map.of()));
  }


  private static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (var walk = Files.walk(dir)) {
      for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }
}
