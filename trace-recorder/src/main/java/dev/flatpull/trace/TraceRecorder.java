package dev.flatpull.trace;

import java.util.ArrayList;
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
  /** One read, as the read path saw it; made only when the recording stops. */
  private record Read(String layer, String path, long offset, int length, long seq, long nanos) {}

  /**
   * Reads of one thread, in fixed-size blocks of parallel arrays: recording a read allocates nothing but, every
   * {@value #BLOCK} reads, a new block (never a copy). One writer (its thread); {@link #stop} reads what the volatile
   * size publishes.
   */
  private static final class Buffer {
    private static final int BLOCK = 4096;

    private static final class Block {
      final String[] layers = new String[BLOCK];
      final String[] paths = new String[BLOCK];
      final long[] offsets = new long[BLOCK];
      final int[] lengths = new int[BLOCK];
      final long[] seqs = new long[BLOCK];
      final long[] nanos = new long[BLOCK];
    }

    private final List<Block> blocks = new java.util.concurrent.CopyOnWriteArrayList<>();
    private Block current;
    private volatile int size;

    void add(String layer, String path, long offset, int length, long seq, long time) {
      int n = size;
      int i = n % BLOCK;
      if (i == 0) {
        current = new Block();
        blocks.add(current);
      }
      Block b = current;
      b.layers[i] = layer;
      b.paths[i] = path;
      b.offsets[i] = offset;
      b.lengths[i] = length;
      b.seqs[i] = seq;
      b.nanos[i] = time;
      size = n + 1; // publishes the stores above
    }

    void drainTo(List<Read> out) {
      int n = size;
      for (int k = 0; k < n; k++) {
        Block b = blocks.get(k / BLOCK);
        int i = k % BLOCK;
        out.add(new Read(b.layers[i], b.paths[i], b.offsets[i], b.lengths[i], b.seqs[i], b.nanos[i]));
      }
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
        s.local.get().add(layerDigest, path, offset, length, s.seq.getAndIncrement(), System.nanoTime());
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
      b.drainTo(reads);
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
