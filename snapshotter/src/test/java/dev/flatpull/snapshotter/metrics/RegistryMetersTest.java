package dev.flatpull.snapshotter.metrics;

import dev.flatpull.endpoints.metrics.Meters;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RequestKind;
import java.time.Duration;
import org.junit.jupiter.api.Test;

class RegistryMetersTest {
  @Test
  void registryTraffic_includingRangesAMirrorIgnored_isScraped() {
    Meters meters = new Meters();
    FetchStatistics fetched = new FetchStatistics();
    new DaemonMeters(meters).bindRegistry(fetched);
    fetched.requestFinished(RequestKind.BLOB_RANGE, "mirror:5000", 200, 0, Duration.ofMillis(3));
    fetched.rangeIgnored("mirror:5000", true);
    fetched.rangeIgnored("mirror:5000", true);
    fetched.rangeIgnored("origin", false);
    String text = meters.scrape();
    assertTrue(text.contains("flatpull_registry_ranges_ignored_total{action=\"given_up\"} 2.0"), text);
    assertTrue(text.contains("flatpull_registry_ranges_ignored_total{action=\"read_through\"} 1.0"), text);
    assertTrue(text.contains("flatpull_registry_requests_total{kind=\"blob_range\"} 1.0"), text);
  }
}
