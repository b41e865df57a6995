package dev.flatpull.snapshotter.overlay;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/** {@link SnapshotterMetrics} counted in memory, for tests and benchmarks. */
public final class SnapshotterCounters implements SnapshotterMetrics {
  private final LongAdder remoteSnapshots = new LongAdder();
  private final Map<String, LongAdder> fallbacks = new ConcurrentHashMap<>();
  private final AtomicLong pendingDeletions = new AtomicLong();

  @Override
  public void remoteSnapshot() {
    remoteSnapshots.increment();
  }

  @Override
  public void fallback(String reason) {
    fallbacks.computeIfAbsent(reason, r -> new LongAdder()).increment();
  }

  @Override
  public void deletionStarted() {
    pendingDeletions.incrementAndGet();
  }

  @Override
  public void deletionFinished(long nanos) {
    pendingDeletions.decrementAndGet();
  }

  public long remoteSnapshots() {
    return remoteSnapshots.sum();
  }

  public long fallbacks(String reason) {
    LongAdder a = fallbacks.get(reason);
    return a == null ? 0 : a.sum();
  }

  public long pendingDeletions() {
    return pendingDeletions.get();
  }
}
