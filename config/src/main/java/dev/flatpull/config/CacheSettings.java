package dev.flatpull.config;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Objects;
import java.util.Optional;

/**
 * The host-wide page cache.
 *
 * @param directory where the disk tier lives; empty means {@code ROOT/cache}
 * @param memoryBytes budget of the memory tier
 * @param diskBytes budget of the disk tier; least recently used packs of entries are evicted beyond it
 * @param reservationWait how long a reader waits for a producer (the runtime-image stream) to fill a reserved entry
 *     before fetching it itself
 */
public record CacheSettings(Optional<Path> directory, long memoryBytes, long diskBytes, Duration reservationWait) {
  public static final CacheSettings DEFAULTS =
      new CacheSettings(Optional.empty(), 256L << 20, 10L << 30, Duration.ofSeconds(30));

  public CacheSettings {
    Objects.requireNonNull(directory);
    Objects.requireNonNull(reservationWait);
    if (memoryBytes < 0 || diskBytes < 0) {
      throw new IllegalArgumentException("cache budgets must not be negative");
    }
  }

  /** The disk tier's directory for a configuration whose state lives in {@code root}. */
  public Path directoryUnder(Path root) {
    return directory.orElse(root.resolve("cache"));
  }
}
