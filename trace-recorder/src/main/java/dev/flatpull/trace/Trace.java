package dev.flatpull.trace;

import java.time.Instant;
import java.util.List;
import java.util.Objects;

/**
 * The pages a service version read from its image from start until ready.
 *
 * @param service what was recorded
 * @param flatpullVersion the recording flatpull's version
 * @param recordedAt when the (last) recording finished
 * @param readyMillis time to ready of each recording, in order
 * @param layers per layer, the pages read, in first-access order; layers nothing was read from are left out
 */
public record Trace(ServiceVersion service, String flatpullVersion, Instant recordedAt, List<Long> readyMillis,
    List<LayerTrace> layers) {
  /** The version of the file format this code writes; readers refuse newer ones. */
  public static final int FORMAT_VERSION = 1;

  public Trace {
    Objects.requireNonNull(service);
    Objects.requireNonNull(flatpullVersion);
    Objects.requireNonNull(recordedAt);
    readyMillis = List.copyOf(readyMillis);
    layers = List.copyOf(layers);
    if (readyMillis.isEmpty()) {
      throw new IllegalArgumentException("a trace comes from at least one recording");
    }
  }

  public int runs() {
    return readyMillis.size();
  }

  public long pages() {
    return layers.stream().mapToLong(LayerTrace::pages).sum();
  }

  public long bytes() {
    return layers.stream().mapToLong(LayerTrace::bytes).sum();
  }
}
