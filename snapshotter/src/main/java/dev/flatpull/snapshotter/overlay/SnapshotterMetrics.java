package dev.flatpull.snapshotter.overlay;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/** Counters of the snapshotter, exposed in Prometheus' text format by the daemon. */
public final class SnapshotterMetrics {
  private final LongAdder remoteSnapshots = new LongAdder();
  private final Map<String, LongAdder> fallbacks = new ConcurrentHashMap<>();
  private final LongAdder removals = new LongAdder();
  private final AtomicLong pendingDeletions = new AtomicLong();
  private final LongAdder deletionNanos = new LongAdder();

  void remoteSnapshot() {
    remoteSnapshots.increment();
  }

  void fallback(String reason) {
    fallbacks.computeIfAbsent(reason, r -> new LongAdder()).increment();
  }

  void removal() {
    removals.increment();
  }

  void deletionStarted() {
    pendingDeletions.incrementAndGet();
  }

  void deletionFinished(long nanos) {
    pendingDeletions.decrementAndGet();
    deletionNanos.add(nanos);
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

  /** Appends the counters in Prometheus' text exposition format. */
  public void writeTo(StringBuilder out) {
    out.append("# HELP flatpull_remote_snapshots_total Layers served lazily instead of downloaded.\n")
        .append("# TYPE flatpull_remote_snapshots_total counter\n")
        .append("flatpull_remote_snapshots_total ").append(remoteSnapshots.sum()).append('\n')
        .append("# HELP flatpull_remote_fallbacks_total Layers asked for remotely but downloaded, by reason.\n")
        .append("# TYPE flatpull_remote_fallbacks_total counter\n");
    fallbacks.forEach((reason, n) ->
        out.append("flatpull_remote_fallbacks_total{reason=\"").append(reason).append("\"} ").append(n.sum()).append('\n'));
    out.append("# TYPE flatpull_snapshot_removals_total counter\n")
        .append("flatpull_snapshot_removals_total ").append(removals.sum()).append('\n')
        .append("# HELP flatpull_pending_deletions Removed snapshots whose files are still being deleted.\n")
        .append("# TYPE flatpull_pending_deletions gauge\n")
        .append("flatpull_pending_deletions ").append(pendingDeletions.get()).append('\n')
        .append("# TYPE flatpull_deletion_seconds_total counter\n")
        .append("flatpull_deletion_seconds_total ").append(deletionNanos.sum() / 1e9).append('\n');
  }
}
