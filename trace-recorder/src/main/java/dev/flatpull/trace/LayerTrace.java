package dev.flatpull.trace;

import java.util.List;
import java.util.Objects;

/**
 * The pages read from one layer, in first-access order.
 *
 * @param layerDigest the layer's (compressed) digest, as in the image manifest
 * @param files paths in the layer, referred to by index from {@code runs}
 * @param runs page runs in the order they were first read
 */
public record LayerTrace(String layerDigest, List<String> files, List<PageRun> runs) {
  public static final int PAGE_SIZE = 4096;

  public LayerTrace {
    Objects.requireNonNull(layerDigest);
    files = List.copyOf(files);
    runs = List.copyOf(runs);
    for (PageRun r : runs) {
      if (r.file() >= files.size()) {
        throw new IllegalArgumentException("page run refers to file " + r.file() + " of " + files.size());
      }
    }
  }

  public long pages() {
    return runs.stream().mapToLong(PageRun::pages).sum();
  }

  public long bytes() {
    return pages() * PAGE_SIZE;
  }
}
