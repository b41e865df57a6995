package dev.flatpull.fuse;

import dev.flatpull.core.VerifiedContent;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.pagecache.Reservation;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;

/**
 * Fetches a layer's content into the page cache ahead of reads: first the prioritized files (those before the eStargz
 * prefetch landmark, or a given list) in large coalesced requests, then, if enabled, everything else in layer order in
 * smaller batches that wait while any on-demand read is waiting for the registry. Each chunk is reserved before it is
 * fetched, so a reader that needs it meanwhile waits for this fetch instead of issuing its own. Runs on the caller's
 * thread (give it one of its own); never part of mounting.
 */
public final class LayerPrefetcher implements Runnable {
  private static final System.Logger LOG = System.getLogger(LayerPrefetcher.class.getName());
  private static final long PRIORITY_BATCH = 32L << 20;
  private static final long BACKGROUND_BATCH = 1L << 20;

  private final LazyLayer layer;
  private final PageCache cache;
  private final ReadActivity activity;
  private final List<String> prioritized;
  private final boolean background;
  private final AtomicBoolean stopped = new AtomicBoolean();
  private final LongAdder chunks = new LongAdder();
  private final LongAdder bytes = new LongAdder();
  private volatile Runnable whole = () -> {};

  /**
   * @param prioritized files to fetch first, usually the layer's own list ({@code layer.index().prioritized()}, the
   *     files before its landmark); empty for none
   * @param background whether to fetch the rest of the layer afterwards
   */
  public LayerPrefetcher(LazyLayer layer, PageCache cache, ReadActivity activity, List<String> prioritized, boolean background) {
    this.layer = layer;
    this.cache = cache;
    this.activity = activity;
    this.prioritized = List.copyOf(prioritized);
    this.background = background;
  }

  @Override
  public void run() {
    try {
      List<LayerEntry> first = new ArrayList<>();
      for (String name : prioritized) {
        layer.index().entry(name).map(e -> layer.index().contentOf(e))
            .filter(e -> e.type() == EntryType.REG).ifPresent(first::add);
      }
      fetch(first, PRIORITY_BATCH, false);
      if (background) {
        // Walked as it is fetched, not collected first: each entry is made from the index as it is reached (a layer
        // of a million entries would otherwise hold as many objects for the whole background fetch).
        fetch(layer.index().entries(), BACKGROUND_BATCH, true);
        if (!stopped.get()) {
          whole.run();
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (IOException | RuntimeException e) {
      // Prefetching is an optimisation: readers fetch what it did not.
      LOG.log(System.Logger.Level.WARNING, "prefetch of layer " + layer.index().blob() + " stopped: " + e);
    }
  }

  private void fetch(Iterable<LayerEntry> files, long batchBytes, boolean yieldToReads)
      throws IOException, InterruptedException {
    List<LayerChunk> batch = new ArrayList<>();
    long size = 0;
    for (LayerEntry f : files) {
      if (f.type() != EntryType.REG) {
        continue;
      }
      for (LayerChunk c : f.chunks()) {
        if (stopped.get()) {
          return;
        }
        if (c.stored().isEmpty()) {
          continue;
        }
        batch.add(c);
        size += c.stored().length();
        if (size >= batchBytes) {
          flush(batch, yieldToReads);
          batch.clear();
          size = 0;
        }
      }
    }
    flush(batch, yieldToReads);
  }

  /**
   * Reserves the chunks of a batch that no one has cached or is fetching, fetches them coalesced across files into as
   * few requests as the layout allows, and fills them. Yielding to on-demand reads happens before anything is
   * reserved: a read that needs a chunk of this batch meanwhile must find it free to fetch itself, not reserved by a
   * fetch that waits for that very read to end.
   */
  private void flush(List<LayerChunk> batch, boolean yieldToReads) throws IOException, InterruptedException {
    if (batch.isEmpty()) {
      return;
    }
    if (yieldToReads) {
      activity.awaitIdle();
    }
    Map<LayerChunk, Reservation> reserved = new LinkedHashMap<>();
    try {
      for (LayerChunk c : batch) {
        if (!reserved.containsKey(c)) {
          // The background's content is for later: kept out of the memory tier unless a read waits for it. The
          // prioritized files are expected to be read soon.
          (yieldToReads ? cache.reserveForLater(c.digest()) : cache.reserve(c.digest()))
              .ifPresent(r -> reserved.put(c, r));
        }
      }
      if (reserved.isEmpty()) {
        return;
      }
      List<LayerChunk> wanted = new ArrayList<>(reserved.keySet());
      Map<LayerChunk, VerifiedContent> got = layer.fetchChunks(wanted);
      for (LayerChunk c : wanted) {
        reserved.remove(c).fill(got.get(c));
        chunks.increment();
        bytes.add(c.size());
      }
    } finally {
      reserved.values().forEach(Reservation::abandon);
    }
  }

  /**
   * Runs {@code then} on this prefetcher's thread once a background fetch has brought every chunk of the layer into
   * the page cache (not after a stop or a failure).
   */
  public LayerPrefetcher whenWhole(Runnable then) {
    this.whole = then;
    return this;
  }

  /** Stops after the batch in flight. */
  public void stop() {
    stopped.set(true);
  }

  public long prefetchedChunks() {
    return chunks.sum();
  }

  public long prefetchedBytes() {
    return bytes.sum();
  }
}
