package dev.flatpull.pagecache;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;

/**
 * How a producer of many reservations (a runtime-image stream) shows that it still moves. A reader waiting for one of
 * its entries waits as long as the producer advances at least once per {@code stall}; a producer that stands still
 * for that long is given up on, and the reader fetches the content itself. So a slow but moving stream is waited for,
 * a stuck one costs a reader one {@code stall}, never the whole reservation wait.
 */
public final class ProducerProgress {
  private final Duration stall;
  private final AtomicLong advances = new AtomicLong();

  /** @param stall the longest a reader waits without seeing the producer advance */
  public ProducerProgress(Duration stall) {
    this.stall = Objects.requireNonNull(stall);
    if (stall.isNegative() || stall.isZero()) {
      throw new IllegalArgumentException("stall must be positive, got " + stall);
    }
  }

  /** Records that the producer moved (bytes arrived, an entry was filled). */
  public void advanced() {
    advances.incrementAndGet();
  }

  public Duration stall() {
    return stall;
  }

  /** A value that changes whenever the producer advances. */
  long mark() {
    return advances.get();
  }
}
