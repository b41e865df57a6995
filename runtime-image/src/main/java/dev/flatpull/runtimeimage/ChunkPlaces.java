package dev.flatpull.runtimeimage;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.layer.MergedLayers;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * Where an image shows a chunk of content, found by its digest: what carries content of one version of an image over
 * to another ({@link TraceRebase} in CI, borrowing at a node). Only what the image's merged view shows counts: a file
 * an upper layer replaces or whites out is not shown, and nothing of it is taken, although its bytes are the image's.
 * Reads no content; built over the image's verified layer indexes. Not thread-safe.
 */
final class ChunkPlaces {
  /** Lookups only: nothing here reads a layer's blob. */
  private static final BlobReader NO_READS = range -> {
    throw new IOException("layer content is not read here");
  };

  /**
   * A chunk of the image: in layer {@code layer} (an index into the layers given), of file {@code file}.
   *
   * @param samePath whether it was found at the path and offset asked for, rather than elsewhere by its digest
   */
  record Place(int layer, LayerEntry file, LayerChunk chunk, boolean samePath) {}

  /** A regular file the image shows, in layer {@code layer}. */
  record Shown(int layer, LayerEntry file) {}

  private final List<LayerIndex> layers;
  private final List<LazyLayer> views = new ArrayList<>();
  private final MergedLayers merged;
  private final Set<Digest> sought;
  private Map<Digest, Place> byDigest;
  private final Map<String, Optional<Shown>> shown = new HashMap<>();

  /**
   * @param layers the image's lazily readable layers, bottom first
   * @param sought the digests {@link #find} will be asked for: only the files holding one are looked at where a chunk
   *     is not at the place asked for (mapping every chunk of a JDK's image whole took about 0.15 s of a cold start
   *     that borrowed, in code not yet compiled)
   */
  ChunkPlaces(List<LayerIndex> layers, Set<Digest> sought) {
    this.layers = List.copyOf(layers);
    this.sought = Set.copyOf(sought);
    for (LayerIndex l : this.layers) {
      views.add(new LazyLayer(l, NO_READS, 0));
    }
    this.merged = new MergedLayers(views.size(), views::get);
  }

  List<LayerIndex> layers() {
    return layers;
  }

  /**
   * The chunk of {@code size} bytes with {@code digest}: at {@code offset} of the file the image shows at
   * {@code path} if it has it there, else, for a digest sought, wherever the image shows a chunk with that digest and
   * size.
   */
  Optional<Place> find(String path, long offset, long size, Digest digest) throws IOException {
    Optional<Place> same = atSamePath(path, offset, size, digest);
    if (same.isPresent()) {
      return same;
    }
    if (byDigest == null) {
      byDigest = visibleChunks();
    }
    Place p = byDigest.get(digest);
    return p == null || p.chunk().size() != size ? Optional.empty() : Optional.of(p);
  }

  /**
   * The regular file the image shows at {@code path} (symbolic links followed), if it shows one. Kept per path: a
   * runtime image names one file for many extents, and each entry made holds every chunk of its file (the JDK's
   * modules file, thousands of them, for each of its extents).
   */
  Optional<Shown> shownAt(String path) throws IOException {
    Optional<Shown> known = shown.get(path);
    if (known == null) {
      known = resolve(path);
      shown.put(path, known);
    }
    return known;
  }

  private Optional<Shown> resolve(String path) throws IOException {
    MergedLayers.Found found;
    try {
      found = merged.resolve(path);
    } catch (FileNotFoundException e) {
      return Optional.empty();
    }
    LayerEntry file = found.layer().index().contentOf(found.entry());
    return file.type() != EntryType.REG ? Optional.empty()
        : Optional.of(new Shown(views.indexOf(found.layer()), file));
  }

  private Optional<Place> atSamePath(String path, long offset, long size, Digest digest) throws IOException {
    Optional<Shown> shown = shownAt(path);
    if (shown.isEmpty()) {
      return Optional.empty();
    }
    for (LayerChunk n : LazyLayer.covering(shown.get().file(), offset, 1)) {
      if (n.fileOffset() == offset && n.size() == size && digest.equals(n.digest())) {
        return Optional.of(new Place(shown.get().layer(), shown.get().file(), n, true));
      }
    }
    return Optional.empty();
  }

  /**
   * The chunks with a digest sought, of the regular files the image shows, by digest; the topmost place of a digest
   * wins. Built only when a chunk is not at the place asked for; entries are made only for the files holding one.
   */
  private Map<Digest, Place> visibleChunks() throws IOException {
    Map<Digest, Place> out = new HashMap<>();
    for (int i = views.size() - 1; i >= 0; i--) {
      LazyLayer layer = views.get(i);
      LayerIndex index = layer.index();
      for (int n : index.entriesHoldingAny(sought)) {
        if (index.typeAt(n) != EntryType.REG) {
          continue;
        }
        Optional<MergedLayers.Found> shown = merged.lookup(index.nameAt(n));
        if (shown.isEmpty() || shown.get().layer() != layer) {
          continue;
        }
        LayerEntry e = index.entryAt(n);
        for (LayerChunk c : e.chunks()) {
          if (c.digest() != null && sought.contains(c.digest())) {
            out.putIfAbsent(c.digest(), new Place(i, e, c, false));
          }
        }
      }
    }
    return out;
  }
}
