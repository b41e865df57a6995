package dev.flatpull.runtimeimage;

import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Frame;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.trace.ServiceVersion;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * The index of a runtime image of another version of an image, re-pointed at this version by content: an extent is
 * kept where this image shows a chunk with the extent's digest (at the same path and offset first, else wherever it
 * shows it; {@link ChunkPlaces}), at that place; the others are dropped and left to the lazy loader. Its frames stay
 * where the blob has them, so that a node fetches the frames that carry kept extents and no others.
 *
 * <p>What it trusts: nothing. The result is bound to this image like any runtime image ({@link ImageBinding}), and
 * each extent's content is checked against this image's chunk digest before it is served. A page-mode runtime image
 * is never borrowed: its digests are the old image's pages, which this image's TOCs cannot vouch for.
 */
public final class BorrowedIndex {
  /**
   * A frame is fetched only when at least this share of what it holds is kept, so that a borrowed start moves at
   * most about twice the content it can use (the frames' compressed bytes, against the chunks the lazy loader would
   * fetch for the same reads).
   */
  public static final double MIN_FRAME_USE = 0.5;

  private BorrowedIndex() {}

  /**
   * A runtime image re-pointed at an image.
   *
   * @param index the extents kept, on the image's layers and manifest; the frames as the blob has them
   * @param extentBytes the bytes the old index serves
   * @param matchedBytes of those, the bytes whose chunk this image shows (what the overlap is)
   * @param keptBytes of those, the bytes in frames worth fetching ({@link #MIN_FRAME_USE})
   * @param keptFrames the frames that carry kept extents
   */
  public record Rebound(RuntimeImageIndex index, long extentBytes, long matchedBytes, long keptBytes, int keptFrames) {
    /** The share of the old runtime image's bytes this image has: 0 to 1. */
    public double overlap() {
      return extentBytes == 0 ? 0 : matchedBytes / (double) extentBytes;
    }
  }

  /**
   * Re-points {@code old} at {@code manifest}, whose lazily readable layers' verified indexes {@code layers} holds.
   *
   * @throws RuntimeImageMismatchException when {@code old} is a page-mode runtime image
   */
  public static Rebound rebind(RuntimeImageIndex old, ImageManifest manifest, Map<Digest, LayerIndex> layers)
      throws IOException {
    if (old.verify() != Verification.IMAGE) {
      throw new RuntimeImageMismatchException("index.verify: a " + old.verify().key() + " runtime image carries the"
          + " old image's page digests, which this image's TOCs cannot vouch for: never borrowed");
    }
    List<Digest> order = new ArrayList<>();
    List<LayerIndex> indexes = new ArrayList<>();
    manifest.layers().forEach(d -> {
      if (layers.containsKey(d.digest())) {
        order.add(d.digest());
        indexes.add(layers.get(d.digest()));
      }
    });
    Set<Digest> sought = new HashSet<>();
    old.layers().forEach(l -> l.extents().forEach(e -> sought.add(e.digest())));
    ChunkPlaces places = new ChunkPlaces(indexes, sought);
    record Kept(int layer, String path, Extent at) {}
    List<Kept> matched = new ArrayList<>();
    long extentBytes = 0;
    long matchedBytes = 0;
    long[] useOfFrame = new long[old.frames().size()];
    Set<Long> counted = new HashSet<>();
    for (LayerExtents l : old.layers()) {
      for (Extent e : l.extents()) {
        extentBytes += e.length();
        String path = l.files().get(e.file());
        Optional<ChunkPlaces.Place> p = places.find(path, e.fileOffset(), e.length(), e.digest());
        if (p.isEmpty()) {
          continue;
        }
        matchedBytes += e.length();
        matched.add(new Kept(p.get().layer(), "/" + p.get().file().name(), new Extent(-1, p.get().chunk().fileOffset(),
            e.length(), e.frame(), e.frameOffset(), e.digest())));
        if (e.frame() >= 0 && e.frame() < useOfFrame.length
            && counted.add(((long) e.frame() << 32) | (e.frameOffset() & 0xffffffffL))) {
          // Content stored once counts once towards its frame's use, wherever it is served.
          useOfFrame[e.frame()] += e.length();
        }
      }
    }
    List<Map<String, Integer>> files = new ArrayList<>();
    List<List<Extent>> extents = new ArrayList<>();
    indexes.forEach(i -> {
      files.add(new LinkedHashMap<>());
      extents.add(new ArrayList<>());
    });
    long keptBytes = 0;
    Set<Integer> keptFrames = new HashSet<>();
    for (Kept k : matched) {
      Extent e = k.at();
      Frame f = e.frame() >= 0 && e.frame() < useOfFrame.length ? old.frames().get(e.frame()) : null;
      if (f == null || useOfFrame[e.frame()] < MIN_FRAME_USE * f.size()) {
        continue;
      }
      Map<String, Integer> named = files.get(k.layer());
      int file = named.computeIfAbsent(k.path(), n -> named.size());
      extents.get(k.layer()).add(new Extent(file, e.fileOffset(), e.length(), e.frame(), e.frameOffset(), e.digest()));
      keptBytes += e.length();
      keptFrames.add(e.frame());
    }
    List<LayerExtents> out = new ArrayList<>();
    for (int i = 0; i < indexes.size(); i++) {
      if (!extents.get(i).isEmpty()) {
        out.add(new LayerExtents(order.get(i), List.copyOf(files.get(i).keySet()), extents.get(i)));
      }
    }
    ServiceVersion s = old.service();
    ServiceVersion here = new ServiceVersion(s.image(), manifest.digest().toString(), s.platform(), s.command(),
        s.environment(), s.workingDirectory(), s.probes());
    RuntimeImageIndex index = new RuntimeImageIndex(old.verify(), here, old.flatpullVersion(), old.createdAt(),
        old.trace(), old.frames(), out);
    return new Rebound(index, extentBytes, matchedBytes, keptBytes, keptFrames.size());
  }
}
