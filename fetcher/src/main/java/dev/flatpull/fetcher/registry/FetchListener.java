package dev.flatpull.fetcher.registry;

import java.time.Duration;

/**
 * Observes registry traffic (for {@code --stats}, metrics and tests). Called on fetch threads: implementations must be
 * fast, thread-safe and must not throw; a throwing listener is ignored.
 */
public interface FetchListener {
  FetchListener NONE = new FetchListener() {};

  /** A response arrived and its body was consumed; {@code bytes} counts body bytes received. */
  default void requestFinished(RequestKind kind, String host, int status, long bytes, Duration elapsed) {}

  /** An attempt failed; {@code willRetry} says whether another attempt follows. */
  default void requestFailed(RequestKind kind, String host, Throwable cause, boolean willRetry) {}

  /**
   * {@code host} answered a range read with the whole blob; {@code gaveUp} says whether the response was dropped for the
   * next endpoint, else it was read through to the range.
   */
  default void rangeIgnored(String host, boolean gaveUp) {}
}
