package dev.flatpull.trace;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Merges recordings of one service version: the union of their pages, each with the number of recordings that read
 * it, ordered by the first recording's first access, then the pages only later recordings read, in their order.
 */
public final class TraceMerger {
  private TraceMerger() {}

  public static List<LayerTrace> merge(List<Map<String, LayerTrace>> recordings) {
    Map<String, PageOrder> byLayer = new TreeMap<>();
    for (Map<String, LayerTrace> recording : recordings) {
      recording.forEach((layer, t) -> byLayer.computeIfAbsent(layer, l -> new PageOrder()).addAll(t));
    }
    return byLayer.entrySet().stream().map(e -> e.getValue().toTrace(e.getKey())).toList();
  }
}
