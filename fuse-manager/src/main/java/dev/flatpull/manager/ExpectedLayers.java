package dev.flatpull.manager;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.EstargzTail;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * Layers whose TOC the daemon asked to be opened with their Prepare, before it had read the image's manifest (the
 * descriptor made of the Prepare's labels, {@link EstargzTail}): the TOC's fetch and parse then overlap the manifest's
 * round trips. Each is held until the image's session claims it, which it does only if the manifest's own descriptor
 * names the same blob, size and TOC digest; otherwise, or when nobody claims it within {@link #KEPT}, it is dropped.
 * Thread-safe.
 */
final class ExpectedLayers {
  /** Long past a Prepare's manifest fetch; short enough that an unclaimed index does not stay in memory. */
  static final Duration KEPT = Duration.ofSeconds(60);
  /** More expected at once than containerd unpacks (one layer at a time per image) is a caller gone wrong. */
  static final int MAX = 64;

  private record Expected(Descriptor descriptor, CompletableFuture<LazyLayer> opening, long since) {}

  private final Map<Digest, Expected> byLayer = new ConcurrentHashMap<>();
  private final LongSupplier nanoTime;
  private final RemoteLayerMetrics metrics;

  ExpectedLayers(LongSupplier nanoTime, RemoteLayerMetrics metrics) {
    this.nanoTime = nanoTime;
    this.metrics = metrics;
  }

  /**
   * Starts opening {@code expected} with {@code open}, unless that layer is already expected or too many are.
   *
   * @return whether it was started
   */
  boolean expect(Descriptor expected, Supplier<CompletableFuture<LazyLayer>> open) {
    long now = nanoTime.getAsLong();
    byLayer.values().removeIf(e -> {
      boolean stale = now - e.since() >= KEPT.toNanos();
      if (stale) {
        metrics.tocExpected("expired");
      }
      return stale;
    });
    if (byLayer.size() >= MAX || byLayer.containsKey(expected.digest())) {
      return false;
    }
    boolean[] started = {false};
    byLayer.computeIfAbsent(expected.digest(), d -> {
      started[0] = true;
      return new Expected(expected, open.get(), now);
    });
    return started[0];
  }

  /**
   * The opening of {@code actual} (a layer as the image's manifest describes it) if it was expected as the same blob,
   * size and TOC digest, and not longer ago than {@link #KEPT}; taken out either way.
   */
  Optional<CompletableFuture<LazyLayer>> claim(Descriptor actual) {
    Expected e = byLayer.remove(actual.digest());
    if (e == null) {
      return Optional.empty();
    }
    if (nanoTime.getAsLong() - e.since() >= KEPT.toNanos()) {
      metrics.tocExpected("expired");
      return Optional.empty();
    }
    if (!EstargzTail.describes(e.descriptor(), actual)) {
      metrics.tocExpected("differs");
      return Optional.empty();
    }
    metrics.tocExpected("used");
    return Optional.of(e.opening());
  }

  /** How many are held. */
  int size() {
    return byLayer.size();
  }
}
