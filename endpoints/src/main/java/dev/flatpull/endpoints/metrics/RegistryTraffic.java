package dev.flatpull.endpoints.metrics;

import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RequestKind;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.MeterRegistry;

/** The registry traffic meters both processes report (the daemon fetches manifests, the FUSE manager the rest). */
public final class RegistryTraffic {
  private RegistryTraffic() {}

  /** Registry traffic of this process, by request kind (both processes fetch: the daemon its manifests). */
  public static void bind(MeterRegistry registry, FetchStatistics f) {
    for (RequestKind k : RequestKind.values()) {
      String kind = k.name().toLowerCase(java.util.Locale.ROOT);
      FunctionCounter.builder("flatpull.registry.requests", f, s -> s.requests(k)).tag("kind", kind)
          .description("Registry requests by this process, by kind").register(registry);
      FunctionCounter.builder("flatpull.registry.bytes", f, s -> s.bytes(k)).tag("kind", kind).baseUnit("bytes")
          .description("Bytes received from registries by this process, by kind").register(registry);
    }
    FunctionCounter.builder("flatpull.registry.failures", f, FetchStatistics::failures)
        .description("Registry requests that failed (retried or not)").register(registry);
    FunctionCounter.builder("flatpull.registry.ranges.ignored", f, FetchStatistics::rangesGivenUp)
        .tag("action", "given_up")
        .description("Range reads a registry answered with the whole blob, by what was done with the response")
        .register(registry);
    FunctionCounter.builder("flatpull.registry.ranges.ignored", f, FetchStatistics::rangesReadThrough)
        .tag("action", "read_through")
        .description("Range reads a registry answered with the whole blob, by what was done with the response")
        .register(registry);
  }
}
