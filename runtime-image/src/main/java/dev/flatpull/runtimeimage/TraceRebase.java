package dev.flatpull.runtimeimage;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * Carries a trace recorded on one version of an image over to another version, by content: a traced range of an old
 * file goes over where a chunk of the new image, visible in its merged view, has the digest of the old chunk that
 * held it. At the same path and offset first; else wherever the new image shows that chunk (a file moved or renamed);
 * else, for a file the new image changed but still shows at that path, the same range of the new file. What the new
 * image lacks (a removed file) is dropped, and left to the lazy loader at a start.
 *
 * <p>What it trusts: nothing. The rebased trace names pages of the new image; a runtime image built from it is built
 * as from any trace, its content read from the new image's layers and verified against their TOCs.
 */
public final class TraceRebase {
  private TraceRebase() {}

  /**
   * A rebased trace and how much of the old one it kept.
   *
   * @param trace the new version's trace: the old one's service, command and probes, on the new manifest
   * @param tracedBytes bytes of the old trace in lazily readable layers (what the overlap is a share of)
   * @param samePathBytes of those, found at the same path and offset in the new image
   * @param movedBytes of those, found elsewhere in the new image by their chunk's digest
   * @param changedBytes of those, not found, in a file the new image still shows at the same path: the same ranges
   *     of the new file are taken instead (a changed configuration or module is most likely read as its old version
   *     was); they do not count towards the overlap
   */
  public record Rebased(Trace trace, long tracedBytes, long samePathBytes, long movedBytes, long changedBytes) {
    /** The share of the old trace's bytes the new image has: 0 when nothing was traced. */
    public double overlap() {
      return tracedBytes == 0 ? 0 : (samePathBytes + movedBytes) / (double) tracedBytes;
    }

    /** Bytes of files the new image no longer shows (removed, or no longer regular files). */
    public long droppedBytes() {
      return tracedBytes - samePathBytes - movedBytes - changedBytes;
    }
  }

  /**
   * The pages a runtime image serves, as a trace of the image it was built for: its extents, in the order they are
   * stored (first access), with its trace's service, time and runs. An extent of the default mode is a whole chunk,
   * so the trace covers the chunks, not only the pages read in them.
   */
  public static Trace traceOf(RuntimeImageIndex index) {
    record Placed(int layer, Extent extent) {}
    List<Placed> all = new ArrayList<>();
    for (int l = 0; l < index.layers().size(); l++) {
      for (Extent e : index.layers().get(l).extents()) {
        all.add(new Placed(l, e));
      }
    }
    all.sort(Comparator.comparingInt((Placed p) -> p.extent().frame()).thenComparingInt(p -> p.extent().frameOffset()));
    List<List<PageRun>> runs = new ArrayList<>();
    index.layers().forEach(l -> runs.add(new ArrayList<>()));
    long order = 0;
    for (Placed p : all) {
      Extent e = p.extent();
      long first = e.fileOffset() / LayerTrace.PAGE_SIZE;
      long end = (e.fileEnd() + LayerTrace.PAGE_SIZE - 1) / LayerTrace.PAGE_SIZE;
      runs.get(p.layer()).add(new PageRun(e.file(), first, (int) (end - first), order++, 1));
    }
    List<LayerTrace> layers = new ArrayList<>();
    for (int l = 0; l < index.layers().size(); l++) {
      LayerExtents x = index.layers().get(l);
      if (!runs.get(l).isEmpty()) {
        layers.add(new LayerTrace(x.digest().toString(), x.files(), runs.get(l)));
      }
    }
    return new Trace(index.service(), index.flatpullVersion(), index.trace().recordedAt(),
        index.trace().readyMillis(), layers);
  }

  /**
   * Rebases {@code old} onto a new image.
   *
   * @param oldLayers the old image's lazily readable layers, by digest (a traced layer missing here is left out)
   * @param service the new version: the image reference and manifest the new trace is for
   * @param newLayers the new image's lazily readable layers, bottom first. A plain layer is left out: nothing of it
   *     can be served lazily, and a chunk it would hide is still the new image's bytes, in the layer named
   */
  public static Rebased rebase(Trace old, Map<Digest, LayerIndex> oldLayers, ServiceVersion service,
      List<LayerIndex> newLayers) throws IOException {
    // What the new image is searched for: every chunk of every traced file (a superset of the traced chunks).
    Set<Digest> sought = new HashSet<>();
    for (LayerTrace lt : old.layers()) {
      LayerIndex index = oldLayers.get(Digest.parse(lt.layerDigest()));
      for (String path : index == null ? List.<String>of() : lt.files()) {
        index.entry(path).map(index::contentOf).ifPresent(e -> e.chunks().stream().map(LayerChunk::digest)
            .filter(java.util.Objects::nonNull).forEach(sought::add));
      }
    }
    ChunkPlaces places = new ChunkPlaces(newLayers, sought);
    List<Map<String, Integer>> files = new ArrayList<>();
    List<List<PageRun>> runs = new ArrayList<>();
    newLayers.forEach(l -> {
      files.add(new LinkedHashMap<>());
      runs.add(new ArrayList<>());
    });
    long traced = 0;
    long same = 0;
    long moved = 0;
    long changed = 0;
    for (LayerTrace lt : old.layers()) {
      LayerIndex index = oldLayers.get(Digest.parse(lt.layerDigest()));
      if (index == null) {
        continue;
      }
      for (PageRun r : lt.runs()) {
        String path = lt.files().get(r.file());
        Optional<LayerEntry> entry = index.entry(path).map(index::contentOf);
        long from = r.firstPage() * LayerTrace.PAGE_SIZE;
        long to = (r.firstPage() + r.pages()) * LayerTrace.PAGE_SIZE;
        if (entry.isEmpty() || entry.get().type() != EntryType.REG) {
          traced += to - from;
          continue;
        }
        to = Math.min(to, entry.get().size());
        if (to <= from) {
          continue;
        }
        traced += to - from;
        for (LayerChunk c : LazyLayer.covering(entry.get(), from, to - from)) {
          long a = Math.max(from, c.fileOffset());
          long b = Math.min(to, c.fileEnd());
          if (b <= a || c.digest() == null) {
            continue;
          }
          Optional<ChunkPlaces.Place> found = places.find(path, c.fileOffset(), c.size(), c.digest());
          if (found.isEmpty()) {
            Optional<ChunkPlaces.Shown> shown = places.shownAt(path);
            long end = shown.isEmpty() ? a : Math.min(b, shown.get().file().size());
            if (end > a) {
              add(files, runs, shown.get().layer(), shown.get().file(), a, end, r);
              changed += end - a;
            }
            continue;
          }
          ChunkPlaces.Place t = found.get();
          long delta = t.chunk().fileOffset() - c.fileOffset();
          add(files, runs, t.layer(), t.file(), a + delta, b + delta, r);
          if (t.samePath()) {
            same += b - a;
          } else {
            moved += b - a;
          }
        }
      }
    }
    List<LayerTrace> layers = new ArrayList<>();
    for (int i = 0; i < newLayers.size(); i++) {
      if (runs.get(i).isEmpty()) {
        continue;
      }
      List<PageRun> ordered = new ArrayList<>(runs.get(i));
      ordered.sort(Comparator.comparingLong(PageRun::firstAccessMicros));
      layers.add(new LayerTrace(newLayers.get(i).blob().toString(), List.copyOf(files.get(i).keySet()), ordered));
    }
    return new Rebased(new Trace(service, old.flatpullVersion(), old.recordedAt(), old.readyMillis(), layers),
        traced, same, moved, changed);
  }

  /** Adds the pages covering bytes {@code [from, to)} of {@code file} in new layer {@code layer}, read as {@code r}. */
  private static void add(List<Map<String, Integer>> files, List<List<PageRun>> runs, int layer, LayerEntry file,
      long from, long to, PageRun r) {
    Map<String, Integer> named = files.get(layer);
    int index = named.computeIfAbsent("/" + file.name(), n -> named.size());
    long firstPage = from / LayerTrace.PAGE_SIZE;
    long endPage = (to + LayerTrace.PAGE_SIZE - 1) / LayerTrace.PAGE_SIZE;
    runs.get(layer).add(new PageRun(index, firstPage, (int) (endPage - firstPage), r.firstAccessMicros(),
        r.frequency()));
  }
}
