package dev.flatpull.config;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Objects;
import java.util.Optional;

/**
 * How flatpull talks to registries.
 *
 * @param hostsDirectory containerd-style {@code certs.d} directory holding {@code HOST/hosts.toml}; empty to use none
 * @param credentialsFile docker {@code config.json} with {@code auths}; empty to use none
 * @param plainHttp use plain HTTP for every registry without a hosts.toml (for local test registries)
 * @param maxConcurrentRequests requests in flight at once across all registries
 * @param connectTimeout TCP/TLS connect timeout
 * @param readTimeout longest wait for the next bytes of a response
 * @param maxAttempts attempts per request, including the first, on resets, timeouts, 5xx and 429
 * @param initialBackoff wait before the first retry; doubles each retry with full jitter
 * @param maxBackoff cap on a single wait (also caps a {@code Retry-After})
 * @param coalesceGapBytes chunks closer than this in a blob are fetched in one range request
 */
public record RegistrySettings(
    Optional<Path> hostsDirectory,
    Optional<Path> credentialsFile,
    boolean plainHttp,
    int maxConcurrentRequests,
    Duration connectTimeout,
    Duration readTimeout,
    int maxAttempts,
    Duration initialBackoff,
    Duration maxBackoff,
    long coalesceGapBytes) {
  public static final RegistrySettings DEFAULTS =
      new RegistrySettings(
          Optional.of(Path.of("/etc/containerd/certs.d")),
          Optional.empty(),
          false,
          16,
          Duration.ofSeconds(10),
          Duration.ofSeconds(30),
          7,
          Duration.ofMillis(200),
          Duration.ofSeconds(10),
          64 * 1024);

  public RegistrySettings {
    Objects.requireNonNull(hostsDirectory);
    Objects.requireNonNull(credentialsFile);
    if (maxConcurrentRequests < 1 || maxAttempts < 1 || coalesceGapBytes < 0) {
      throw new IllegalArgumentException("invalid registry settings");
    }
  }

  public RegistrySettings withPlainHttp(boolean plain) {
    return new RegistrySettings(
        hostsDirectory, credentialsFile, plain, maxConcurrentRequests, connectTimeout, readTimeout, maxAttempts,
        initialBackoff, maxBackoff, coalesceGapBytes);
  }

  public RegistrySettings withBackoff(Duration initial, Duration max) {
    return new RegistrySettings(
        hostsDirectory, credentialsFile, plainHttp, maxConcurrentRequests, connectTimeout, readTimeout, maxAttempts,
        initial, max, coalesceGapBytes);
  }

  public RegistrySettings withTimeouts(Duration connect, Duration read) {
    return new RegistrySettings(
        hostsDirectory, credentialsFile, plainHttp, maxConcurrentRequests, connect, read, maxAttempts,
        initialBackoff, maxBackoff, coalesceGapBytes);
  }
}
