package dev.flatpull.trace;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Pages of one layer in first-access order, deduplicated, with how often each was seen; built into a LayerTrace. */
final class PageOrder {
  private record Key(int file, long page) {}

  private static final class Seen {
    long micros;
    int frequency;

    Seen(long micros, int frequency) {
      this.micros = micros;
      this.frequency = frequency;
    }
  }

  private final Map<String, Integer> fileIndex = new HashMap<>();
  private final List<String> files = new ArrayList<>();
  private final LinkedHashMap<Key, Seen> pages = new LinkedHashMap<>();

  /** Records a page read in this recording; reading it again changes nothing. */
  void first(String path, long page, long micros) {
    int file = fileIndex.computeIfAbsent(path, p -> {
      files.add(p);
      return files.size() - 1;
    });
    pages.putIfAbsent(new Key(file, page), new Seen(micros, 1));
  }

  /** Records a page of another recording; a page seen before keeps its place and earliest time, and adds to its frequency. */
  void touch(String path, long page, long micros, int frequency) {
    int file = fileIndex.computeIfAbsent(path, p -> {
      files.add(p);
      return files.size() - 1;
    });
    Seen seen = pages.get(new Key(file, page));
    if (seen == null) {
      pages.put(new Key(file, page), new Seen(micros, frequency));
    } else {
      seen.micros = Math.min(seen.micros, micros);
      seen.frequency += frequency;
    }
  }

  /** Adds every page of {@code t} as one more recording (frequencies add up). */
  void addAll(LayerTrace t) {
    for (PageRun r : t.runs()) {
      for (int i = 0; i < r.pages(); i++) {
        touch(t.files().get(r.file()), r.firstPage() + i, r.firstAccessMicros(), r.frequency());
      }
    }
  }

  LayerTrace toTrace(String layer) {
    List<PageRun> runs = new ArrayList<>();
    Key runStart = null;
    Seen runSeen = null;
    int runPages = 0;
    Key prev = null;
    for (Map.Entry<Key, Seen> e : pages.entrySet()) {
      Key k = e.getKey();
      Seen s = e.getValue();
      boolean extends_ = prev != null && k.file() == prev.file() && k.page() == prev.page() + 1
          && s.frequency == runSeen.frequency;
      if (extends_) {
        runPages++;
      } else {
        if (runStart != null) {
          runs.add(new PageRun(runStart.file(), runStart.page(), runPages, runSeen.micros, runSeen.frequency));
        }
        runStart = k;
        runSeen = s;
        runPages = 1;
      }
      prev = k;
    }
    if (runStart != null) {
      runs.add(new PageRun(runStart.file(), runStart.page(), runPages, runSeen.micros, runSeen.frequency));
    }
    return new LayerTrace(layer, files, runs);
  }
}
