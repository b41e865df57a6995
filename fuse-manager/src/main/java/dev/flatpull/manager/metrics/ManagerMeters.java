package dev.flatpull.manager.metrics;

import dev.flatpull.endpoints.metrics.Meters;
import dev.flatpull.endpoints.metrics.RegistryTraffic;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RequestKind;
import dev.flatpull.pagecache.CacheStats;
import dev.flatpull.runtimeimage.RuntimeImageDecoder.RejectionKind;
import dev.flatpull.runtimeimage.RuntimeImageLimitException;
import dev.flatpull.runtimeimage.RuntimeImageSelection;
import dev.flatpull.runtimeimage.RuntimeImageStream;
import dev.flatpull.manager.LayerServer;
import dev.flatpull.manager.RemoteLayerMetrics;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import java.util.function.ToDoubleFunction;

/**
 * The FUSE manager's meters: where served content came from (the runtime-image hit ratio), runtime-image loads and
 * why they fell back, registry traffic, the page cache, and the cold-start timeline of each layer and image.
 */
public final class ManagerMeters implements RemoteLayerMetrics {
  /** Every result of a runtime-image lookup (bounded tag values). */
  public static final List<String> LOOKUP_RESULTS = List.of("loaded", "borrowed", "none_found", "other_verification",
      "no_such_service", "lookup_failed", "malformed", "mismatch", "over_limit", "stream_failed", "disabled");
  /** Every limit a runtime image can hit (bounded tag values). */
  public static final List<String> LIMITS = java.util.stream.Stream.concat(RuntimeImageLimitException.LIMITS.stream(),
      java.util.stream.Stream.of("frame_without_extent")).toList();
  private static final List<String> SOURCES = List.of("runtime_image", "lazy", "cache");

  private final MeterRegistry registry;
  private Supplier<CacheStats> cacheStats;
  private final Timer toc;
  private final Timer tree;
  private final Timer mount;
  private final Timer firstByte;
  private final Timer stream;
  private final AtomicLong traceAgeSeconds = new AtomicLong(-1);
  // Looked up once: contentServed runs for every chunk a FUSE read serves.
  private final java.util.Map<String, Counter> servedBySource = new java.util.HashMap<>();

  public ManagerMeters(Meters meters) {
    this.registry = meters.registry();
    for (String s : SOURCES) {
      servedBySource.put(s, served(s));
    }
    for (String r : LOOKUP_RESULTS) {
      lookup(r);
    }
    for (RejectionKind k : RejectionKind.values()) {
      rejected(k.key());
    }
    rejected("stream_failed");
    for (String l : LIMITS) {
      limit(l);
    }
    for (String r : RuntimeImageSelection.PASSED_OVER_REASONS) {
      passedOver(r);
    }
    toc = timer("flatpull.layer.toc", "Remote layer: TOC fetched and verified (or found already opened)");
    tree = timer("flatpull.layer.tree", "Remote layer: file tree built from the TOC");
    mount = timer("flatpull.layer.mount", "Remote layer: FUSE mount until it serves");
    firstByte = timer("flatpull.coldstart.first.byte",
        "From an image's first remote Prepare reaching the FUSE manager to the first byte served from it");
    stream = timer("flatpull.runtime.image.stream", "A runtime image: lookup to the end of its stream");
    Gauge.builder("flatpull.runtime.image.trace.age", traceAgeSeconds, a -> a.get() < 0 ? Double.NaN : a.get())
        .baseUnit("seconds").description("Age of the trace of the runtime image loaded last").register(registry);
  }

  private Timer timer(String name, String description) {
    return Timer.builder(name).description(description).publishPercentileHistogram().register(registry);
  }

  private Counter served(String source) {
    return Counter.builder("flatpull.content.served").baseUnit("bytes").tag("source", source)
        .description("Bytes served to reads, by where their content came from: the runtime image, the lazy loader,"
            + " or content the node already had").register(registry);
  }

  private Counter lookup(String result) {
    return Counter.builder("flatpull.runtime.image.lookups").tag("result", result)
        .description("Runtime-image lookups at an image's first remote Prepare, by result").register(registry);
  }

  private Counter rejected(String reason) {
    return Counter.builder("flatpull.runtime.image.rejected").tag("reason", reason)
        .description("Runtime-image contents given up (the lazy loader served them), by reason").register(registry);
  }

  private Counter limit(String limit) {
    return Counter.builder("flatpull.runtime.image.limits").tag("limit", limit)
        .description("Runtime images that asked more than their image allows, by limit: refused whole (index_size,"
            + " blob_size, frame_size, working_set), or frames not fetched (frame_without_extent)").register(registry);
  }

  private Counter passedOver(String reason) {
    return Counter.builder("flatpull.runtime.image.passed.over").tag("reason", reason)
        .description("Listed runtime images not chosen, by reason").register(registry);
  }

  @Override
  public void runtimeImageLimit(String limit, long count) {
    if (LIMITS.contains(limit)) {
      limit(limit).increment(count);
    }
  }

  @Override
  public void kernelPagesStored(long stored, long missed) {
    kernelPages("stored").increment(stored);
    kernelPages("missed").increment(missed);
  }

  private Counter kernelPages(String result) {
    return Counter.builder("flatpull.kernel.pages").tag("result", result)
        .description("Pages of runtime-image content pushed into the kernel's page cache (stored), or not (missed:"
            + " the kernel did not know the file, or the mount's engine cannot push)").register(registry);
  }

  @Override
  public void runtimeImagePassedOver(String reason) {
    if (RuntimeImageSelection.PASSED_OVER_REASONS.contains(reason)) {
      passedOver(reason).increment();
    }
  }

  /** Binds the counters {@code server} keeps itself: registry traffic, the page cache, the layers served. */
  public void bind(LayerServer server) {
    RegistryTraffic.bind(registry, server.fetched());
    Supplier<CacheStats> c = server::cacheStats;
    // Micrometer's gauges and function counters hold their object weakly: without this reference the supplier was
    // collected and every page-cache figure read NaN (found by RemoteSnapshotIT's cache-empty test).
    cacheStats = c;
    cacheCounter("flatpull.page.cache.hits", "memory", c, CacheStats::memoryHits);
    cacheCounter("flatpull.page.cache.hits", "disk", c, CacheStats::diskHits);
    cacheCounter("flatpull.page.cache.hits", "reservation", c, CacheStats::reservationHits);
    cacheCounter("flatpull.page.cache.misses", null, c, CacheStats::misses);
    cacheCounter("flatpull.page.cache.loads", null, c, CacheStats::loads);
    cacheCounter("flatpull.page.cache.corrupt.discarded", null, c, CacheStats::corruptDiscarded);
    cacheCounter("flatpull.page.cache.evictions", null, c, CacheStats::evictions);
    cacheCounter("flatpull.page.cache.disk.write.failures", null, c, CacheStats::diskWriteFailures);
    cacheCounter("flatpull.page.cache.write.behind.waits", null, c, CacheStats::writeBehindWaits);
    cacheCounter("flatpull.page.cache.disk.writes.skipped", null, c, CacheStats::diskWritesSkipped);
    Gauge.builder("flatpull.page.cache.disk", c, s -> s.get().diskBytes()).baseUnit("bytes")
        .description("Bytes in the page cache's disk tier").register(registry);
    Gauge.builder("flatpull.page.cache.disk.entries", c, s -> s.get().diskEntries())
        .description("Entries in the page cache's disk tier").register(registry);
    Gauge.builder("flatpull.page.cache.write.behind", c, s -> s.get().writeBehindBytes()).baseUnit("bytes")
        .description("Bytes waiting for their disk write").register(registry);
    Gauge.builder("flatpull.served.layers", server, s -> s.served().size())
        .description("Layers the FUSE manager serves").register(registry);
  }

  private void cacheCounter(String name, String tier, Supplier<CacheStats> stats, ToDoubleFunction<CacheStats> f) {
    FunctionCounter.Builder<Supplier<CacheStats>> b = FunctionCounter.builder(name, stats, s -> f.applyAsDouble(s.get()));
    if (tier != null) {
      b.tag("tier", tier);
    }
    b.register(registry);
  }

  @Override
  public void contentServed(String source, long bytes) {
    servedBySource.getOrDefault(source, servedBySource.get("cache")).increment(bytes);
  }

  @Override
  public void operationFailed(String operation, String cause) {
    Counter.builder("flatpull.fuse.errors").tag("operation", operation).tag("cause", cause)
        .description("FUSE operations of served layers that failed (the reader got an error), by cause: verification"
            + " (bytes that did not match their digest, never served), registry, other").register(registry)
        .increment();
  }

  @Override
  public void layerMounted(Duration tocTime, Duration treeTime, Duration mountTime) {
    toc.record(tocTime);
    tree.record(treeTime);
    mount.record(mountTime);
  }

  @Override
  public void firstByte(Duration sinceMountRequested) {
    firstByte.record(sinceMountRequested);
  }

  @Override
  public void diffIdChecked(String result) {
    Counter.builder("flatpull.layer.diff.id.checks").tag("result", result)
        .description("Layers whose content became local and whose diff_id was checked against the image config,"
            + " by result").register(registry).increment();
  }

  @Override
  public void tocExpected(String result) {
    Counter.builder("flatpull.toc.expected").tag("result", result)
        .description("TOCs opened with their layer's Prepare, before the image's manifest was read, by how they ended")
        .register(registry).increment();
  }

  @Override
  public void runtimeImageLookup(String result) {
    lookup(LOOKUP_RESULTS.contains(result) ? result : "lookup_failed").increment();
  }

  @Override
  public void runtimeImageStreamed(RuntimeImageStream.Outcome o, Duration took, Optional<Duration> traceAge) {
    stream.record(took);
    Counter.builder("flatpull.runtime.image.contents").tag("outcome", "delivered").register(registry)
        .increment(o.delivered());
    Counter.builder("flatpull.runtime.image.contents").tag("outcome", "reused")
        .description("Runtime-image contents streamed into the cache, or already on the node (incremental reuse)")
        .register(registry).increment(o.reused());
    Counter.builder("flatpull.runtime.image.content").baseUnit("bytes").tag("outcome", "delivered").register(registry)
        .increment(o.deliveredBytes());
    Counter.builder("flatpull.runtime.image.content").baseUnit("bytes").tag("outcome", "reused").register(registry)
        .increment(o.reusedBytes());
    Counter.builder("flatpull.runtime.image.requests").description("Registry requests for runtime-image blobs")
        .register(registry).increment(o.requests());
    o.rejected().forEach((kind, n) -> rejected(kind.key()).increment(n));
    if (o.failure().filter("stream_failed"::equals).isPresent()) {
      rejected("stream_failed").increment();
    }
    traceAge.ifPresent(a -> traceAgeSeconds.set(a.toSeconds()));
  }

  @Override
  public void runtimeImageBorrowed(long bytes, double overlap) {
    Counter.builder("flatpull.runtime.image.borrowed").baseUnit("bytes")
        .description("Content of other versions' runtime images kept for images that have none of their own")
        .register(registry).increment(bytes);
    DistributionSummary.builder("flatpull.runtime.image.borrowed.overlap")
        .description("Share of a borrowed runtime image's bytes the borrowing image has, 0 to 1")
        .register(registry).record(overlap);
  }
}
