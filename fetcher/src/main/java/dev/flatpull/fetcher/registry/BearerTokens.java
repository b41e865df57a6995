package dev.flatpull.fetcher.registry;

import java.time.Duration;
import java.time.Instant;
import java.time.InstantSource;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Bearer tokens cached per (registry host, scope) until shortly before they expire. A token the registry rejects is
 * dropped with {@link #invalidate}, so the next request fetches a fresh one.
 */
final class BearerTokens {
  /** Docker's token spec: a token without {@code expires_in} lives 60 s. */
  static final Duration DEFAULT_LIFETIME = Duration.ofSeconds(60);

  private static final Duration EARLY_REFRESH = Duration.ofSeconds(5);

  private record Key(String host, String scope) {}

  private record Token(String value, Instant expires) {}

  private final ConcurrentHashMap<Key, Token> tokens = new ConcurrentHashMap<>();
  private final InstantSource clock;

  BearerTokens(InstantSource clock) {
    this.clock = clock;
  }

  Optional<String> get(String host, String scope) {
    Token t = tokens.get(new Key(host, scope));
    if (t == null || !clock.instant().isBefore(t.expires.minus(EARLY_REFRESH))) {
      return Optional.empty();
    }
    return Optional.of(t.value);
  }

  void put(String host, String scope, String token, Duration lifetime) {
    tokens.put(new Key(host, scope), new Token(token, clock.instant().plus(lifetime)));
  }

  void invalidate(String host, String scope, String token) {
    tokens.computeIfPresent(new Key(host, scope), (k, t) -> t.value.equals(token) ? null : t);
  }
}
