package dev.flatpull.runtimeimage;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.layer.MergedLayers;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * Carries a trace recorded on one version of an image over to another version, by content: a traced range of an old
 * file goes over where a chunk of the new image, visible in its merged view, has the digest of the old chunk that
 * held it. At the same path and offset first; else wherever the new image shows that chunk (a file moved or renamed).
 * What the new image lacks (a changed or removed file) is dropped, and left to the lazy loader at a start.
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
   */
  public record Rebased(Trace trace, long tracedBytes, long samePathBytes, long movedBytes) {
    /** The share of the old trace's bytes the new image has: 0 when nothing was traced. */
    public double overlap() {
      return tracedBytes == 0 ? 0 : (samePathBytes + movedBytes) / (double) tracedBytes;
    }

    public long droppedBytes() {
      return tracedBytes - samePathBytes - movedBytes;
    }
  }

  /** Where a chunk of the old image lies in the new one. */
  private record Target(int layer, LayerEntry file, LayerChunk chunk) {}

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
      List<LazyLayer> newLayers) throws IOException {
    MergedLayers merged = new MergedLayers(newLayers.size(), newLayers::get);
    Map<Digest, Target> byDigest = null;
    List<Map<String, Integer>> files = new ArrayList<>();
    List<List<PageRun>> runs = new ArrayList<>();
    newLayers.forEach(l -> {
      files.add(new LinkedHashMap<>());
      runs.add(new ArrayList<>());
    });
    long traced = 0;
    long same = 0;
    long moved = 0;
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
          Target t = atSamePath(merged, newLayers, path, c);
          boolean samePath = t != null;
          if (t == null) {
            if (byDigest == null) {
              byDigest = visibleChunks(merged, newLayers);
            }
            t = byDigest.get(c.digest());
            if (t == null || t.chunk().size() != c.size()) {
              continue;
            }
          }
          long delta = t.chunk().fileOffset() - c.fileOffset();
          Map<String, Integer> named = files.get(t.layer());
          int file = named.computeIfAbsent("/" + t.file().name(), n -> named.size());
          long firstPage = (a + delta) / LayerTrace.PAGE_SIZE;
          long endPage = (b + delta + LayerTrace.PAGE_SIZE - 1) / LayerTrace.PAGE_SIZE;
          runs.get(t.layer()).add(new PageRun(file, firstPage, (int) (endPage - firstPage), r.firstAccessMicros(),
              r.frequency()));
          if (samePath) {
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
      layers.add(new LayerTrace(newLayers.get(i).index().blob().toString(), List.copyOf(files.get(i).keySet()),
          ordered));
    }
    return new Rebased(new Trace(service, old.flatpullVersion(), old.recordedAt(), old.readyMillis(), layers),
        traced, same, moved);
  }

  /** The chunk of the file the new image shows at {@code path} that has {@code c}'s place and digest, if any. */
  private static Target atSamePath(MergedLayers merged, List<LazyLayer> layers, String path, LayerChunk c)
      throws IOException {
    MergedLayers.Found found;
    try {
      found = merged.resolve(path);
    } catch (FileNotFoundException e) {
      return null;
    }
    LayerEntry file = found.layer().index().contentOf(found.entry());
    if (file.type() != EntryType.REG) {
      return null;
    }
    for (LayerChunk n : LazyLayer.covering(file, c.fileOffset(), 1)) {
      if (n.fileOffset() == c.fileOffset() && n.size() == c.size() && c.digest().equals(n.digest())) {
        return new Target(layers.indexOf(found.layer()), file, n);
      }
    }
    return null;
  }

  /**
   * Every chunk of a regular file the new image shows, by digest; the topmost place of a digest wins. Built only when
   * a chunk is not at its old place: a file shadowed by an upper layer or whited out is not shown, and nothing of it
   * is taken.
   */
  private static Map<Digest, Target> visibleChunks(MergedLayers merged, List<LazyLayer> layers) throws IOException {
    Map<Digest, Target> out = new HashMap<>();
    for (int i = layers.size() - 1; i >= 0; i--) {
      LazyLayer layer = layers.get(i);
      for (LayerEntry e : layer.index().entries()) {
        if (e.type() != EntryType.REG || e.chunks().isEmpty()) {
          continue;
        }
        Optional<MergedLayers.Found> shown = merged.lookup(e.name());
        if (shown.isEmpty() || shown.get().layer() != layer) {
          continue;
        }
        for (LayerChunk c : e.chunks()) {
          if (c.digest() != null) {
            out.putIfAbsent(c.digest(), new Target(i, e, c));
          }
        }
      }
    }
    return out;
  }
}
