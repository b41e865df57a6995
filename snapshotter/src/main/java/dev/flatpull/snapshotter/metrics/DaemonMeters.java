package dev.flatpull.snapshotter.metrics;

import dev.flatpull.endpoints.metrics.Meters;
import dev.flatpull.endpoints.metrics.RegistryTraffic;
import dev.flatpull.snapshotter.overlay.SnapshotterMetrics;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/** The snapshotter daemon's meters ({@code flatpull serve}). */
public final class DaemonMeters implements SnapshotterMetrics {
  private final MeterRegistry registry;
  private final Counter remoteSnapshots;
  private final Counter removals;
  private final Counter deletionSeconds;
  private final AtomicLong pendingDeletions = new AtomicLong();
  private final Timer prepareManifest;
  private final Timer prepareMount;

  public DaemonMeters(Meters meters) {
    this.registry = meters.registry();
    remoteSnapshots = Counter.builder("flatpull.remote.snapshots")
        .description("Layers served lazily instead of downloaded").register(registry);
    for (String reason : FALLBACK_REASONS) {
      fallbackCounter(reason);
    }
    removals = Counter.builder("flatpull.snapshot.removals").description("Snapshots removed").register(registry);
    deletionSeconds = Counter.builder("flatpull.deletion.seconds")
        .description("Time spent deleting removed snapshots' files").register(registry);
    Gauge.builder("flatpull.pending.deletions", pendingDeletions, AtomicLong::get)
        .description("Removed snapshots whose files are still being deleted").register(registry);
    prepareManifest = Timer.builder("flatpull.prepare.manifest")
        .description("Remote Prepare: from its arrival to the layer's manifest being known")
        .publishPercentileHistogram().register(registry);
    prepareMount = Timer.builder("flatpull.prepare.mount")
        .description("Remote Prepare: from the manifest to the FUSE manager's mount returning")
        .publishPercentileHistogram().register(registry);
  }

  /** A Snapshots API call of {@code method} answered in {@code nanos}: containerd waits for each. */
  public void call(String method, long nanos) {
    Timer.builder("flatpull.snapshots.calls").tag("method", method)
        .description("containerd's calls of the Snapshots API, from arrival to answer")
        .register(registry).record(nanos, TimeUnit.NANOSECONDS);
  }

  /** The daemon's own registry traffic (manifests, mostly). */
  public void bindRegistry(dev.flatpull.fetcher.registry.FetchStatistics fetched) {
    RegistryTraffic.bind(registry, fetched);
  }

  private Counter fallbackCounter(String reason) {
    return Counter.builder("flatpull.remote.fallbacks").tag("reason", reason)
        .description("Layers asked for remotely but downloaded, by reason").register(registry);
  }

  @Override
  public void remoteSnapshot() {
    remoteSnapshots.increment();
  }

  @Override
  public void fallback(String reason) {
    fallbackCounter(FALLBACK_REASONS.contains(reason) ? reason : "other").increment();
  }

  @Override
  public void remotePrepared(Duration manifest, Duration mount) {
    prepareManifest.record(manifest);
    prepareMount.record(mount);
  }

  @Override
  public void removal() {
    removals.increment();
  }

  @Override
  public void deletionStarted() {
    pendingDeletions.incrementAndGet();
  }

  @Override
  public void deletionFinished(long nanos) {
    pendingDeletions.decrementAndGet();
    deletionSeconds.increment(nanos / (double) TimeUnit.SECONDS.toNanos(1));
  }
}
