package dev.flatpull.fetcher.registry;

import java.time.Duration;
import java.time.Instant;
import java.time.InstantSource;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Which endpoints answered a range read of which blob with the whole blob ({@code 200}). A pull-through cache does
 * that for a blob it does not hold yet (the distribution registry in proxy mode serves an uncached blob from its
 * upstream in full, and ranges only once its copy is stored), so such a blob's range reads go to the next endpoint
 * for a while, and the cache is asked again after a back-off that doubles while it keeps ignoring ranges: the cache's
 * own fill (which the first, dropped request started) usually ends within seconds. Thread-safe.
 */
final class IgnoredRanges {
  static final Duration FIRST_RETRY = Duration.ofSeconds(5);
  static final Duration MAX_RETRY = Duration.ofMinutes(5);
  /** Bounds memory when a mirror never honours ranges: beyond this many blobs, expired entries are dropped. */
  private static final int PRUNE_ABOVE = 4096;

  private record Key(String endpoint, String path) {}

  private record Avoid(Instant until, Duration backoff) {}

  private final Map<Key, Avoid> avoided = new ConcurrentHashMap<>();
  private final InstantSource clock;

  IgnoredRanges(InstantSource clock) {
    this.clock = clock;
  }

  /** Whether range reads of {@code path} should skip {@code endpoint} (its API root) for now. */
  boolean avoid(String endpoint, String path) {
    if (avoided.isEmpty()) {
      return false; // no mirror ignored a range: every range read asks, so this stays free
    }
    Avoid a = avoided.get(new Key(endpoint, path));
    return a != null && clock.instant().isBefore(a.until());
  }

  /** {@code endpoint} answered a range read of {@code path} with the whole blob. */
  void ignored(String endpoint, String path) {
    Instant now = clock.instant();
    avoided.compute(new Key(endpoint, path), (k, old) -> {
      Duration next = old == null ? FIRST_RETRY : min(old.backoff().multipliedBy(2), MAX_RETRY);
      return new Avoid(now.plus(next), next);
    });
    if (avoided.size() > PRUNE_ABOVE) {
      avoided.values().removeIf(a -> now.isAfter(a.until().plus(MAX_RETRY)));
    }
  }

  /** {@code endpoint} honoured a range read of {@code path}: it holds the blob now. */
  void honoured(String endpoint, String path) {
    if (!avoided.isEmpty()) {
      avoided.remove(new Key(endpoint, path));
    }
  }

  private static Duration min(Duration a, Duration b) {
    return a.compareTo(b) <= 0 ? a : b;
  }
}
