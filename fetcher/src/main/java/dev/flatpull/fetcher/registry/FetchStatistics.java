package dev.flatpull.fetcher.registry;

import java.time.Duration;
import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.LongAdder;

/** Counts registry requests and received bytes per {@link RequestKind}. Thread-safe and lock-free. */
public final class FetchStatistics implements FetchListener {
  private final Map<RequestKind, LongAdder> requests = new EnumMap<>(RequestKind.class);
  private final Map<RequestKind, LongAdder> bytes = new EnumMap<>(RequestKind.class);
  private final LongAdder failures = new LongAdder();
  private final LongAdder rangesGivenUp = new LongAdder();
  private final LongAdder rangesReadThrough = new LongAdder();

  public FetchStatistics() {
    for (RequestKind k : RequestKind.values()) {
      requests.put(k, new LongAdder());
      bytes.put(k, new LongAdder());
    }
  }

  @Override
  public void requestFinished(RequestKind kind, String host, int status, long n, Duration elapsed) {
    requests.get(kind).increment();
    bytes.get(kind).add(n);
  }

  @Override
  public void requestFailed(RequestKind kind, String host, Throwable cause, boolean willRetry) {
    failures.increment();
  }

  @Override
  public void rangeIgnored(String host, boolean gaveUp) {
    (gaveUp ? rangesGivenUp : rangesReadThrough).increment();
  }

  /** Range reads answered with the whole blob and dropped for the next endpoint. */
  public long rangesGivenUp() {
    return rangesGivenUp.sum();
  }

  /** Range reads answered with the whole blob and read through to the range (no other endpoint, or near the start). */
  public long rangesReadThrough() {
    return rangesReadThrough.sum();
  }

  public long requests(RequestKind kind) {
    return requests.get(kind).sum();
  }

  public long bytes(RequestKind kind) {
    return bytes.get(kind).sum();
  }

  public long totalRequests() {
    return requests.values().stream().mapToLong(LongAdder::sum).sum();
  }

  public long totalBytes() {
    return bytes.values().stream().mapToLong(LongAdder::sum).sum();
  }

  /** Failed attempts, retried or not. */
  public long failures() {
    return failures.sum();
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder();
    sb.append("requests=").append(totalRequests()).append(" bytes=").append(totalBytes());
    for (RequestKind k : RequestKind.values()) {
      if (requests(k) > 0) {
        sb.append(' ').append(k.name().toLowerCase(java.util.Locale.ROOT)).append('=')
            .append(requests(k)).append('/').append(bytes(k)).append('B');
      }
    }
    if (rangesGivenUp() + rangesReadThrough() > 0) {
      sb.append(" ranges_ignored=").append(rangesGivenUp()).append(" given up/").append(rangesReadThrough())
          .append(" read through");
    }
    if (failures() > 0) {
      sb.append(" failed_attempts=").append(failures());
    }
    return sb.toString();
  }
}
