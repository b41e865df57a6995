package dev.flatpull.fetcher.registry;

import java.time.Duration;

/** Waits between retries; injected so tests can observe back-off without waiting. */
@FunctionalInterface
public interface Sleeper {
  Sleeper SYSTEM = d -> Thread.sleep(d.toMillis());

  void sleep(Duration d) throws InterruptedException;
}
