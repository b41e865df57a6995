package dev.flatpull.trace;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Queue;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Records the reads of a read path while a recording runs. A read costs one volatile check when nothing is recorded;
 * while recording, one atomic increment and an append to a buffer only the reading thread writes: no lock, no I/O.
 * Normalising to pages, deduplication and ordering happen when the recording stops.
 */
public final class TraceRecorder {
  /** One read, as the read path saw it. */
  private record Read(String layer, String path, long offset, int length, long seq, long nanos) {}

  /** Reads of one thread; one writer (its thread), read by {@link #stop} through the volatile size. */
  private static final class Buffer {
    private Read[] items = new Read[256];
    private volatile Read[] published = items;
    private volatile int size;

    void add(Read r) {
      int n = size;
      if (n == items.length) {
        items = Arrays.copyOf(items, n * 2);
        published = items;
      }
      items[n] = r;
      size = n + 1;
    }

    List<Read> snapshot() {
      int n = size;
      return Arrays.asList(published).subList(0, n);
    }
  }

  private static final class Session {
    final long startNanos = System.nanoTime();
    final AtomicLong seq = new AtomicLong();
    final Queue<Buffer> buffers = new ConcurrentLinkedQueue<>();
    final ThreadLocal<Buffer> local = ThreadLocal.withInitial(() -> {
      Buffer b = new Buffer();
      buffers.add(b);
      return b;
    });
  }

  /** Where one layer's reads are reported. */
  @FunctionalInterface
  public interface ReadTap {
    void read(String path, long offset, int length);
  }

  private volatile Session session;

  /** The tap for the layer {@code layerDigest}; cheap to call on every read, recording or not. */
  public ReadTap tap(String layerDigest) {
    return (path, offset, length) -> {
      Session s = session;
      if (s != null && length > 0) {
        s.local.get().add(new Read(layerDigest, path, offset, length, s.seq.getAndIncrement(), System.nanoTime()));
      }
    };
  }

  public boolean isRecording() {
    return session != null;
  }

  /** Starts a recording, discarding one in progress. */
  public void start() {
    session = new Session();
  }

  /**
   * Stops the recording and returns, per layer digest, the 4 KiB pages read, deduplicated, in first-access order.
   *
   * @throws IllegalStateException when nothing is being recorded
   */
  public Map<String, LayerTrace> stop() {
    Session s = session;
    if (s == null) {
      throw new IllegalStateException("not recording");
    }
    session = null;
    List<Read> reads = new ArrayList<>();
    for (Buffer b : s.buffers) {
      reads.addAll(b.snapshot());
    }
    reads.sort(Comparator.comparingLong(Read::seq));
    Map<String, PageOrder> byLayer = new TreeMap<>();
    for (Read r : reads) {
      long micros = Math.max(0, (r.nanos() - s.startNanos) / 1000);
      PageOrder order = byLayer.computeIfAbsent(r.layer(), l -> new PageOrder());
      long first = r.offset() / LayerTrace.PAGE_SIZE;
      long last = (r.offset() + r.length() - 1) / LayerTrace.PAGE_SIZE;
      for (long page = first; page <= last; page++) {
        order.first(r.path(), page, micros);
      }
    }
    Map<String, LayerTrace> out = new TreeMap<>();
    byLayer.forEach((layer, order) -> out.put(layer, order.toTrace(layer)));
    return out;
  }
}
