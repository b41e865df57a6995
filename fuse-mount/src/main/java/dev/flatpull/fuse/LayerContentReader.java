package dev.flatpull.fuse;

import dev.flatpull.core.VerifiedContent;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.pagecache.Reservation;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The read path of one layer: file range → covering chunks → page cache → on a miss, one coalesced fetch of the
 * missing chunks through the lazy layer (which verifies each) → cache → bytes. Missing chunks are reserved in the
 * page cache before they are fetched, so a read of identical content in another layer or image waits for this fetch
 * instead of repeating it. A miss also fetches the file's next uncached chunks, up to {@code readahead} bytes, in the
 * same request: FUSE delivers reads 128 KiB at a time, and one round trip per chunk would otherwise bound sequential
 * reads. Thread-safe.
 */
public final class LayerContentReader {
  /** Default readahead: a few chunks of the default 4 MiB chunk size would be too much for small reads. */
  public static final long DEFAULT_READAHEAD = 4L << 20;
  /** Largest neighbourhood window a run of forward misses grows to. */
  public static final long MAX_NEIGHBOURHOOD = 4L << 20;

  private final LazyLayer layer;
  private final PageCache cache;
  private final long readahead;
  private final ReadActivity activity;
  private final ContentEvents events;
  private final PendingProducers producers;
  private final PageSource pages;
  private final long neighbourhood;
  // The neighbourhood window: where the last one lay in the blob, and its current size (see neighbours()).
  private long windowStart = -1;
  private long windowEnd = -1;
  private long window;

  public LayerContentReader(LazyLayer layer, PageCache cache) {
    this(layer, cache, DEFAULT_READAHEAD, new ReadActivity());
  }

  public LayerContentReader(LazyLayer layer, PageCache cache, long readahead, ReadActivity activity) {
    this(layer, cache, readahead, activity, ContentEvents.NONE, PendingProducers.NONE, PageSource.NONE);
  }

  /**
   * @param readahead bytes past a missed read to fetch along with it, from the same file; 0 for none
   * @param activity told while a read waits for content, so that background prefetching steps aside
   * @param events told where each chunk a read served came from
   * @param producers asked before a miss is fetched, so that content about to be streamed is waited for instead
   * @param pages content a producer brings page by page, taken for a missing chunk when it has every page needed
   */
  public LayerContentReader(LazyLayer layer, PageCache cache, long readahead, ReadActivity activity,
      ContentEvents events, PendingProducers producers, PageSource pages) {
    this(layer, cache, readahead, activity, events, producers, pages, 0);
  }

  /**
   * @param neighbourhood bytes of the blob after a miss whose chunks (of the files that follow it) are fetched with it,
   *     growing while misses move forward (see {@link #neighbours}); 0 for none
   */
  public LayerContentReader(LazyLayer layer, PageCache cache, long readahead, ReadActivity activity,
      ContentEvents events, PendingProducers producers, PageSource pages, long neighbourhood) {
    this.neighbourhood = neighbourhood;
    this.window = neighbourhood;
    this.layer = layer;
    this.cache = cache;
    this.readahead = readahead;
    this.activity = activity;
    this.events = events;
    this.producers = producers;
    this.pages = pages;
  }

  /** Reads up to {@code length} bytes of {@code file} at {@code offset}; returns how many (0 at end of file). */
  public int read(LayerEntry file, long offset, byte[] dst, int length) throws IOException {
    return read(file, offset, ByteBuffer.wrap(dst), 0, length);
  }

  /**
   * Reads up to {@code length} bytes of {@code file} at {@code offset} into {@code dst} from its absolute index
   * {@code at} (its position untouched); returns how many (0 at end of file). A FUSE engine passes the answer it
   * writes to the kernel, so that cached content is copied once on its way there.
   */
  public int read(LayerEntry file, long offset, ByteBuffer dst, int at, int length) throws IOException {
    if (offset >= file.size() || length == 0) {
      return 0;
    }
    int n = (int) Math.min(length, file.size() - offset);
    List<LayerChunk> chunks = LazyLayer.covering(file, offset, n);
    Map<LayerChunk, byte[]> data = new LinkedHashMap<>();
    Map<LayerChunk, ContentEvents.Origin> origins = new java.util.HashMap<>();
    List<LayerChunk> missing = new ArrayList<>();
    for (LayerChunk c : chunks) {
      if (c.stored().isEmpty()) {
        continue; // a hole: zeros, written below
      }
      Optional<byte[]> hit = cache.get(c.digest());
      if (hit.isPresent()) {
        data.put(c, hit.get());
        origins.put(c, ContentEvents.Origin.PRESENT);
      } else {
        missing.add(c);
      }
    }
    // Parts of missing chunks served from a page source; allocated only when a read misses and there is one.
    Map<LayerChunk, byte[]> sliced = Map.of();
    if (!missing.isEmpty()) {
      activity.begin();
      try {
        producers.awaitAnnounced();
        if (pages != PageSource.NONE) {
          sliced = new java.util.HashMap<>();
          missing = fromPages(file, offset, n, missing, sliced, origins);
        }
        if (!missing.isEmpty()) {
          List<LayerChunk> ahead = new ArrayList<>();
          if (readahead > 0) {
            for (LayerChunk c : LazyLayer.covering(file, offset + n,
                Math.min(readahead, Math.max(0, file.size() - offset - n)))) {
              if (!c.stored().isEmpty() && c.fileOffset() >= offset + n) {
                ahead.add(c);
              }
            }
          }
          ahead.addAll(neighbours(missing, ahead));
          fetchMissing(file, missing, ahead, data, origins);
        }
      } finally {
        activity.end();
      }
    }
    for (LayerChunk c : chunks) {
      if (c.stored().isEmpty()) {
        zero(dst, at + (int) (Math.max(offset, c.fileOffset()) - offset),
            (int) (Math.min(offset + n, c.fileEnd()) - Math.max(offset, c.fileOffset())));
        continue;
      }
      byte[] slice = sliced.get(c);
      if (slice != null) {
        // Already cut to the read's range, from a page source.
        dst.put(at + (int) (Math.max(offset, c.fileOffset()) - offset), slice, 0, slice.length);
        continue;
      }
      int copied = c.copyInto(data.get(c), offset, n, dst, at);
      ContentEvents.Origin origin = origins.get(c);
      if (origin != null) {
        events.served(c.digest(), copied, origin);
      }
    }
    return n;
  }

  private static final byte[] ZEROS = new byte[64 << 10];

  /** Zeros {@code length} bytes of {@code dst} from {@code index}: a hole's bytes, allocated for no read. */
  private static void zero(ByteBuffer dst, int index, int length) {
    for (int done = 0; done < length; done += ZEROS.length) {
      dst.put(index + done, ZEROS, 0, Math.min(ZEROS.length, length - done));
    }
  }

  /**
   * The chunks stored after a miss in the blob (the files that follow it in layer order: usually its directory's
   * other files), within a window that starts at {@code neighbourhood} bytes of the blob and doubles, up to
   * {@link #MAX_NEIGHBOURHOOD}, while misses move forward through the blob near the last window; a miss elsewhere
   * resets it. A lazy loader pays a round trip per miss, and a starting service reads file after file of the same
   * packages, one at a time.
   */
  private List<LayerChunk> neighbours(List<LayerChunk> missing, List<LayerChunk> ahead) {
    if (neighbourhood <= 0) {
      return List.of();
    }
    long start = Long.MAX_VALUE;
    long end = 0;
    for (List<LayerChunk> l : List.of(missing, ahead)) {
      for (LayerChunk c : l) {
        start = Math.min(start, c.stored().offset());
        end = Math.max(end, c.stored().end());
      }
    }
    long window;
    synchronized (this) {
      boolean forward = start >= windowStart && start < windowEnd + this.window;
      this.window = forward ? Math.min(MAX_NEIGHBOURHOOD, this.window * 2) : neighbourhood;
      window = this.window;
      windowStart = end;
      windowEnd = end + window;
    }
    List<LayerChunk> out = new ArrayList<>();
    for (LayerChunk c : layer.index().chunksStoredIn(end, end + window)) {
      if (!cache.contains(c.digest())) {
        out.add(c);
      }
    }
    return out;
  }

  /**
   * Builds the blob-order index of the layer's chunks that the neighbourhood reads ({@link #neighbours}), so that the
   * layer's first miss does not: it took 20-50 ms of the first read of a cold start (10,000 chunks, code the warm-up
   * had run once). Safe to call from any thread, once or more; a miss before it has run builds the index itself.
   */
  public void prepare() {
    if (neighbourhood > 0) {
      layer.index().chunksStoredIn(0, 0);
    }
  }

  /** A needed chunk's content; one that arrived garbled (a proxy, a network) is fetched again, with retries. */
  private VerifiedContent arrived(LayerEntry file, LayerChunk c, CompletableFuture<VerifiedContent> f)
      throws IOException {
    try {
      return LazyLayer.join(f);
    } catch (dev.flatpull.core.DigestMismatchException | dev.flatpull.fetcher.layer.LayerFormatException corrupt) {
      return layer.fetch(file, List.of(c)).get(c);
    }
  }

  private static void fillOrAbandon(Reservation r, VerifiedContent content) {
    if (content == null) {
      r.abandon();
      return;
    }
    try {
      r.fill(content);
    } catch (IOException | RuntimeException e) {
      r.abandon();
    }
  }

  /** Nothing verified to offer: a page the source named is neither cached nor arriving. */
  private static final class NoPage extends IOException {
    NoPage() {
      super("page not available");
    }
  }

  /**
   * Serves the part of each missing chunk the read needs from the page source, when it has every page of that part
   * (cached, or reserved by its producer: then waited for as any reservation); returns the chunks still missing.
   */
  private List<LayerChunk> fromPages(LayerEntry file, long offset, int n, List<LayerChunk> missing,
      Map<LayerChunk, byte[]> sliced, Map<LayerChunk, ContentEvents.Origin> origins) throws IOException {
    List<LayerChunk> rest = new ArrayList<>();
    for (LayerChunk c : missing) {
      long from = Math.max(offset, c.fileOffset());
      long to = Math.min(offset + n, c.fileEnd());
      byte[] slice = new byte[(int) (to - from)];
      List<Object[]> served = new ArrayList<>();
      boolean whole = true;
      for (long p = from / PageSource.PAGE_SIZE; p * PageSource.PAGE_SIZE < to && whole; p++) {
        Optional<dev.flatpull.core.Digest> d = pages.page(file.name(), p);
        if (d.isEmpty()) {
          whole = false;
          break;
        }
        byte[] page;
        ContentEvents.Origin origin = ContentEvents.Origin.PRESENT;
        Optional<byte[]> hit = cache.get(d.get());
        if (hit.isPresent()) {
          page = hit.get();
        } else {
          try {
            page = cache.getOrLoad(d.get(), () -> {
              throw new NoPage();
            });
            origin = ContentEvents.Origin.WAITED;
          } catch (NoPage e) {
            whole = false;
            break;
          }
        }
        long pageStart = p * PageSource.PAGE_SIZE;
        long a = Math.max(from, pageStart);
        long b = Math.min(to, pageStart + page.length);
        if (b - a < Math.min(to, pageStart + PageSource.PAGE_SIZE) - a) {
          whole = false; // a page shorter than the file has there: not this file's page
          break;
        }
        System.arraycopy(page, (int) (a - pageStart), slice, (int) (a - from), (int) (b - a));
        served.add(new Object[] {d.get(), (int) (b - a), origin});
      }
      if (whole) {
        sliced.put(c, slice);
        origins.remove(c);
        for (Object[] s : served) {
          events.served((dev.flatpull.core.Digest) s[0], (Integer) s[1], (ContentEvents.Origin) s[2]);
        }
      } else {
        rest.add(c);
      }
    }
    return rest;
  }

  /**
   * Fetches the missing chunks of a read, and those of {@code ahead} that no one has cached or is fetching, in one
   * coalesced request. Readahead chunks are only reserved, never looked up or waited for: the read does not need them.
   */
  private void fetchMissing(LayerEntry file, List<LayerChunk> missing, List<LayerChunk> ahead,
      Map<LayerChunk, byte[]> data, Map<LayerChunk, ContentEvents.Origin> origins) throws IOException {
    Map<LayerChunk, Reservation> mine = new LinkedHashMap<>();
    List<LayerChunk> others = new ArrayList<>();
    for (LayerChunk c : missing) {
      Optional<Reservation> r = cache.reserve(c.digest());
      if (r.isPresent()) {
        mine.put(c, r.get());
      } else {
        others.add(c);
      }
    }
    // Readahead and neighbours ride on this read's own request. When everything it missed is on its way already (a
    // runtime-image stream reserved it), there is no request to ride on: a lone speculative one would race the
    // stream for what the service reads next (seen as a seventh request before ready in RuntimeImageColdStartIT).
    if (!mine.isEmpty()) {
      for (LayerChunk c : ahead) {
        if (!mine.containsKey(c)) {
          cache.reserve(c.digest()).ifPresent(r -> mine.put(c, r));
        }
      }
    }
    if (!mine.isEmpty()) {
      Set<LayerChunk> needed = new HashSet<>(missing);
      Map<LayerChunk, CompletableFuture<VerifiedContent>> arriving;
      try {
        arriving = layer.fetchAsync(file, new ArrayList<>(mine.keySet()), needed);
      } catch (RuntimeException e) {
        mine.values().forEach(Reservation::abandon);
        throw e;
      }
      // Readahead fills its reservations as it arrives, after this read has returned; a read that needs one of them
      // meanwhile waits for that chunk alone.
      List<Map.Entry<LayerChunk, Reservation>> waited = new ArrayList<>();
      for (Map.Entry<LayerChunk, Reservation> e : mine.entrySet()) {
        if (needed.contains(e.getKey())) {
          waited.add(e);
        } else {
          Reservation r = e.getValue();
          arriving.get(e.getKey()).whenComplete((content, failure) -> fillOrAbandon(r, content));
        }
      }
      for (int k = 0; k < waited.size(); k++) {
        LayerChunk c = waited.get(k).getKey();
        VerifiedContent content;
        try {
          content = arrived(file, c, arriving.get(c));
          waited.get(k).getValue().fill(content);
        } catch (IOException | RuntimeException e) {
          for (int rest = k; rest < waited.size(); rest++) {
            waited.get(rest).getValue().abandon();
          }
          throw e;
        }
        data.put(c, content.bytes());
        origins.put(c, ContentEvents.Origin.FETCHED);
      }
    }
    for (LayerChunk c : others) {
      boolean[] loaded = {false};
      data.put(c, cache.getOrLoad(c.digest(), () -> {
        loaded[0] = true;
        return layer.fetch(file, List.of(c)).get(c);
      }));
      origins.put(c, loaded[0] ? ContentEvents.Origin.FETCHED : ContentEvents.Origin.WAITED);
    }
  }
}
