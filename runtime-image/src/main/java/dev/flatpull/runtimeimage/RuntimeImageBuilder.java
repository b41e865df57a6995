package dev.flatpull.runtimeimage;

import com.github.luben.zstd.Zstd;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.core.Progress;
import dev.flatpull.core.VerifiedContent;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Frame;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.runtimeimage.RuntimeImageIndex.TraceSummary;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.Trace;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * Builds a runtime image from a trace and the image it was recorded on: the traced pages are mapped to what can be
 * verified (the covering chunks of each layer's TOC, or single pages in the opt-in mode), in first-access order across
 * layers, read through the lazy layers (coalesced requests, every chunk verified), deduplicated by digest (identical
 * content of other files and layers is stored once), packed into frames of one layer each, and compressed. Refuses a
 * trace of another image, or one naming layers, files or pages the image does not have. Not thread-safe; one build at
 * a time.
 */
public final class RuntimeImageBuilder {
  /** How much chunk content is fetched and held at once. */
  private static final long BATCH_BYTES = 32L << 20;

  /** Opens a layer of the image for lazy reading. */
  @FunctionalInterface
  public interface LayerSource {
    LazyLayer open(Descriptor layer) throws IOException;
  }

  /** What was built. */
  public record Built(RuntimeImageIndex index, byte[] blob, Statistics statistics) {}

  /**
   * Figures of a build.
   *
   * @param tracedPages the trace's pages (over the layers the runtime image covers)
   * @param extents places content is served at (chunks or pages per traced file)
   * @param uniqueExtents distinct contents stored
   * @param contentBytes the stored content, decompressed
   * @param blobBytes the blob, compressed, with its header and index
   * @param skippedLayers layers of the trace left out (plain layers, which flatpull does not serve lazily)
   */
  public record Statistics(long tracedPages, long extents, long uniqueExtents, long contentBytes, long blobBytes,
      List<Digest> skippedLayers) {
    public Statistics {
      skippedLayers = List.copyOf(skippedLayers);
    }
  }

  private final RuntimeImageSettings settings;
  private final InstantSource clock;
  private final String flatpullVersion;
  private final Progress progress;

  public RuntimeImageBuilder(RuntimeImageSettings settings, InstantSource clock, String flatpullVersion,
      Progress progress) {
    this.settings = settings;
    this.clock = clock;
    this.flatpullVersion = flatpullVersion;
    this.progress = progress;
  }

  /** One traced layer, opened. */
  private record Source(LayerTrace trace, Descriptor descriptor, LazyLayer lazy, LayerEntry[] files) {}

  /** One extent to be stored, in first-access order, before its content is known. */
  private record Piece(int layer, int file, long fileOffset, int length, List<LayerChunk> chunks) {}

  /**
   * @throws RuntimeImageMismatchException when the trace does not fit the image
   * @throws IOException when the registry fails or a chunk does not verify
   */
  public Built build(Trace trace, ImageManifest manifest, LayerSource layers) throws IOException {
    if (!trace.service().manifestDigest().equals(manifest.digest().toString())) {
      throw new RuntimeImageMismatchException("trace.service.manifestDigest: the trace was recorded on manifest "
          + trace.service().manifestDigest() + ", but the image is " + manifest.digest());
    }
    List<Source> sources = new ArrayList<>();
    List<Digest> skipped = new ArrayList<>();
    List<Descriptor> order = manifest.layers();
    List<LayerTrace> traced = new ArrayList<>(trace.layers());
    for (LayerTrace t : traced) {
      if (order.stream().noneMatch(d -> d.digest().toString().equals(t.layerDigest()))) {
        throw new RuntimeImageMismatchException("trace layer " + t.layerDigest() + " is not in image manifest "
            + manifest.digest());
      }
    }
    for (Descriptor d : order) {
      Optional<LayerTrace> t = traced.stream().filter(l -> l.layerDigest().equals(d.digest().toString())).findFirst();
      if (t.isEmpty()) {
        continue;
      }
      if (LayerFormat.of(d) == LayerFormat.PLAIN) {
        progress.step("layer " + d.digest().shortHex() + " is a plain layer (not eStargz or zstd:chunked), which"
            + " flatpull does not serve lazily: left out");
        skipped.add(d.digest());
        continue;
      }
      LazyLayer lazy = layers.open(d);
      sources.add(new Source(t.get(), d, lazy, files(t.get(), lazy)));
    }
    List<Piece> pieces = pieces(sources);
    progress.step("trace: " + pieces.size() + " " + (settings.verify() == Verification.IMAGE ? "chunks" : "pages")
        + " to store over " + sources.size() + " layer" + (sources.size() == 1 ? "" : "s"));
    return pack(trace, sources, pieces, skipped);
  }

  private static LayerEntry[] files(LayerTrace t, LazyLayer lazy) throws RuntimeImageMismatchException {
    LayerEntry[] files = new LayerEntry[t.files().size()];
    for (int i = 0; i < files.length; i++) {
      String path = t.files().get(i);
      Optional<LayerEntry> e = lazy.index().entry(path);
      LayerEntry content = e.map(lazy.index()::contentOf).orElse(null);
      if (content == null || content.type() != EntryType.REG) {
        throw new RuntimeImageMismatchException("trace layer " + t.layerDigest() + ": file " + path
            + " is not a regular file of the layer");
      }
      files[i] = content;
    }
    for (int j = 0; j < t.runs().size(); j++) {
      PageRun r = t.runs().get(j);
      long size = files[r.file()].size();
      long lastPageStart = (r.firstPage() + r.pages() - 1) * (long) LayerTrace.PAGE_SIZE;
      if (lastPageStart >= size) {
        throw new RuntimeImageMismatchException("trace layer " + t.layerDigest() + " run " + j + ": pages "
            + r.firstPage() + ".." + (r.firstPage() + r.pages() - 1) + " of " + t.files().get(r.file())
            + " lie beyond its end (" + size + " bytes)");
      }
    }
    return files;
  }

  /** The extents to store, in first-access order across layers, each once per (layer, file, offset). */
  private List<Piece> pieces(List<Source> sources) {
    record Event(int layer, PageRun run) {}
    List<Event> events = new ArrayList<>();
    for (int l = 0; l < sources.size(); l++) {
      for (PageRun r : sources.get(l).trace().runs()) {
        events.add(new Event(l, r));
      }
    }
    events.sort(Comparator.comparingLong(e -> e.run().firstAccessMicros()));
    List<Piece> out = new ArrayList<>();
    Set<List<Long>> seen = new HashSet<>();
    for (Event ev : events) {
      Source s = sources.get(ev.layer());
      LayerEntry file = s.files()[ev.run().file()];
      long start = ev.run().firstPage() * LayerTrace.PAGE_SIZE;
      long end = Math.min(file.size(), start + (long) ev.run().pages() * LayerTrace.PAGE_SIZE);
      if (settings.verify() == Verification.IMAGE) {
        for (LayerChunk c : LazyLayer.covering(file, start, end - start)) {
          // A hole costs no transfer: the lazy loader serves its zeros from the TOC alone.
          if (!c.stored().isEmpty() && seen.add(List.of((long) ev.layer(), (long) ev.run().file(), c.fileOffset()))) {
            out.add(new Piece(ev.layer(), ev.run().file(), c.fileOffset(), (int) c.size(), List.of(c)));
          }
        }
      } else {
        for (long off = start; off < end; off += LayerTrace.PAGE_SIZE) {
          if (seen.add(List.of((long) ev.layer(), (long) ev.run().file(), off))) {
            int len = (int) Math.min(LayerTrace.PAGE_SIZE, file.size() - off);
            out.add(new Piece(ev.layer(), ev.run().file(), off, len, LazyLayer.covering(file, off, len)));
          }
        }
      }
    }
    return out;
  }

  /** A frame being filled with content of one layer; numbered when closed. */
  private static final class OpenFrame {
    final int layer;
    final ByteArrayOutputStream content = new ByteArrayOutputStream();
    int number = -1;

    OpenFrame(int layer) {
      this.layer = layer;
    }
  }

  private record Placement(OpenFrame frame, int offset) {}

  private record Pending(int layer, int file, long fileOffset, int length, Placement at, Digest digest) {}

  private Built pack(Trace trace, List<Source> sources, List<Piece> pieces, List<Digest> skipped) throws IOException {
    Map<Integer, OpenFrame> open = new HashMap<>();
    List<OpenFrame> created = new ArrayList<>();
    List<OpenFrame> closed = new ArrayList<>();
    List<byte[]> compressed = new ArrayList<>();
    Map<Digest, Placement> stored = new HashMap<>();
    List<Pending> pending = new ArrayList<>(pieces.size());
    long fetched = 0;
    long total = 0;
    Set<List<Object>> counted = new java.util.HashSet<>();
    for (Piece p : pieces) {
      for (LayerChunk c : p.chunks()) {
        if (counted.add(List.of(p.layer(), c))) {
          total += c.size();
        }
      }
    }
    progress.bytes("fetching and verifying the traced chunks", 0, total);
    int i = 0;
    while (i < pieces.size()) {
      int j = i;
      long batch = 0;
      Map<Integer, Set<LayerChunk>> wanted = new LinkedHashMap<>();
      while (j < pieces.size() && (batch < BATCH_BYTES || j == i)) {
        Piece p = pieces.get(j);
        for (LayerChunk c : p.chunks()) {
          if (wanted.computeIfAbsent(p.layer(), k -> new java.util.LinkedHashSet<>()).add(c)) {
            batch += c.size();
          }
        }
        j++;
      }
      Map<Integer, Map<LayerChunk, VerifiedContent>> content = new HashMap<>();
      for (Map.Entry<Integer, Set<LayerChunk>> w : wanted.entrySet()) {
        content.put(w.getKey(), sources.get(w.getKey()).lazy().fetchChunks(new ArrayList<>(w.getValue())));
      }
      fetched += batch;
      for (int k = i; k < j; k++) {
        Piece p = pieces.get(k);
        Map<LayerChunk, VerifiedContent> got = content.get(p.layer());
        byte[] bytes;
        Digest digest;
        if (settings.verify() == Verification.IMAGE) {
          VerifiedContent c = got.get(p.chunks().get(0));
          bytes = c.bytes();
          digest = c.digest();
        } else {
          bytes = slice(p, got);
          digest = Digest.sha256(bytes);
        }
        Placement at = stored.get(digest);
        if (at == null) {
          OpenFrame f = open.get(p.layer());
          if (f != null && f.content.size() > 0 && f.content.size() + (long) bytes.length > settings.frameSize()) {
            close(f, closed, compressed);
            f = null;
          }
          if (f == null) {
            f = new OpenFrame(p.layer());
            open.put(p.layer(), f);
            created.add(f);
          }
          at = new Placement(f, f.content.size());
          f.content.writeBytes(bytes);
          stored.put(digest, at);
        }
        pending.add(new Pending(p.layer(), p.file(), p.fileOffset(), p.length(), at, digest));
      }
      progress.bytes("fetching and verifying the traced chunks", Math.min(fetched, total), total);
      progress.step(String.format("read %d of %d extents (%.1f MiB of verified chunks)", j, pieces.size(),
          fetched / 1048576.0));
      i = j;
    }
    for (OpenFrame f : created) {
      if (f.number < 0) {
        close(f, closed, compressed);
      }
    }
    List<Frame> frames = new ArrayList<>();
    long offset = 0;
    for (int n = 0; n < closed.size(); n++) {
      OpenFrame f = closed.get(n);
      frames.add(new Frame(f.layer, offset, compressed.get(n).length, f.content.size()));
      offset += compressed.get(n).length;
    }
    List<List<Extent>> extents = new ArrayList<>();
    sources.forEach(s -> extents.add(new ArrayList<>()));
    for (Pending p : pending) {
      extents.get(p.layer()).add(new Extent(p.file(), p.fileOffset(), p.length(), p.at().frame().number,
          p.at().offset(), p.digest()));
    }
    List<LayerExtents> layers = new ArrayList<>();
    for (int l = 0; l < sources.size(); l++) {
      layers.add(new LayerExtents(sources.get(l).descriptor().digest(), sources.get(l).trace().files(),
          extents.get(l)));
    }
    long tracedPages = sources.stream().mapToLong(s -> s.trace().pages()).sum();
    RuntimeImageIndex index = new RuntimeImageIndex(settings.verify(), trace.service(), flatpullVersion,
        clock.instant(), new TraceSummary(trace.recordedAt(), trace.readyMillis(), tracedPages), frames, layers);
    byte[] blob = RuntimeImageFormat.write(index, compressed);
    // Read back what was written: a builder bug must not publish a runtime image every node then rejects.
    RuntimeImageFormat.read(blob);
    return new Built(index, blob, new Statistics(tracedPages, pending.size(), stored.size(), index.contentBytes(),
        blob.length, skipped));
  }

  private void close(OpenFrame f, List<OpenFrame> closed, List<byte[]> compressed) {
    f.number = closed.size();
    closed.add(f);
    compressed.add(Zstd.compress(f.content.toByteArray(), settings.level()));
  }

  /** The page of {@code p} cut out of the verified chunks that cover it. */
  private static byte[] slice(Piece p, Map<LayerChunk, VerifiedContent> got) {
    byte[] out = new byte[p.length()];
    for (LayerChunk c : p.chunks()) {
      byte[] bytes = got.get(c).bytes();
      long from = Math.max(p.fileOffset(), c.fileOffset());
      long to = Math.min(p.fileOffset() + p.length(), c.fileEnd());
      System.arraycopy(bytes, (int) (from - c.fileOffset()), out, (int) (from - p.fileOffset()), (int) (to - from));
    }
    return out;
  }
}
