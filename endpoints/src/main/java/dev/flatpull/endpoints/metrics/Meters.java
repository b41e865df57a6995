package dev.flatpull.endpoints.metrics;

import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.binder.jvm.JvmGcMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The meter registry of one process, with what every flatpull process reports about itself (JVM and resident
 * memory, collections). This package is the only user of Micrometer: the rest of flatpull reports through plain interfaces
 * ({@code SnapshotterMetrics}, {@code RemoteLayerMetrics}) and counters, bound here in each process's composition root.
 */
public final class Meters {
  private final PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);

  public Meters() {
    new JvmMemoryMetrics().bindTo(registry);
    // Collections and their pauses (jvm_gc_pause_seconds): whether a collection fell inside a service's start is what
    // sizes the heap (docs/benchmarks.md, "Memory"). Bound for the process's life, like the registry.
    new JvmGcMetrics().bindTo(registry);
    Gauge.builder("flatpull.process.resident", Meters::residentBytes).baseUnit("bytes")
        .description("Resident memory of this process (VmRSS)").register(registry);
  }

  /** For the meters of the process that owns this registry. */
  public PrometheusMeterRegistry registry() {
    return registry;
  }

  /** The text a scrape returns. */
  public String scrape() {
    return registry.scrape();
  }

  private static double residentBytes() {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
        if (line.startsWith("VmRSS:")) {
          return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024.0;
        }
      }
    } catch (IOException | NumberFormatException e) {
      // Not Linux, or unreadable: no figure.
    }
    return Double.NaN;
  }
}
