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
   * Reads of one thread, in blocks of parallel arrays: recording a read allocates nothing but, now and then, a new
   * block (never a copy). Blocks start small, since libfuse's multi-threaded loop reads on many short-lived threads,
   * and double up to {@value #MAX_BLOCK} entries. One writer (its thread); {@link #stop} reads what the volatile size
   * publishes.
   */
  private static final class Buffer {
    private static final int FIRST_BLOCK = 32;
    private static final int MAX_BLOCK = 4096;

    private static final class Block {
      final String[] layers;
      final String[] paths;
      final long[] offsets;
      final int[] lengths;
      final long[] seqs;
      final long[] nanos;

      Block(int capacity) {
        layers = new String[capacity];
        paths = new String[capacity];
        offsets = new long[capacity];
        lengths = new int[capacity];
        seqs = new long[capacity];
        nanos = new long[capacity];
      }
    }

    private final List<Block> blocks = new java.util.concurrent.CopyOnWriteArrayList<>();
    private Block current;
    private int used;
    private volatile int size;

    void add(String layer, String path, long offset, int length, long seq, long time) {
      if (current == null || used == current.paths.length) {
        current = new Block(current == null ? FIRST_BLOCK : Math.min(MAX_BLOCK, current.paths.length * 2));
        blocks.add(current);
        used = 0;
      }
      Block b = current;
      int i = used++;
      b.layers[i] = layer;
      b.paths[i] = path;
      b.offsets[i] = offset;
      b.lengths[i] = length;
      b.seqs[i] = seq;
      b.nanos[i] = time;
      size = size + 1; // publishes the stores above
    }

    void drainTo(List<Read> out) {
      int n = size;
      for (Block b : blocks) {
        for (int i = 0; i < b.paths.length && n > 0; i++, n--) {
          out.add(new Read(b.layers[i], b.paths[i], b.offsets[i], b.lengths[i], b.seqs[i], b.nanos[i]));
        }
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
