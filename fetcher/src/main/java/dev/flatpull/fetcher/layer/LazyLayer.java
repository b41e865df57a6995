package dev.flatpull.fetcher.layer;

import com.github.luben.zstd.RecyclingBufferPool;
import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.VerifiedContent;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;

/**
 * Reads file contents of one indexed layer on demand. A read fetches only the chunks that cover it; chunks stored
 * within {@code coalesceGap} bytes of each other are fetched in one range request; concurrent reads of the same chunk
 * share one fetch; every chunk is decompressed and checked against its digest before any of its bytes is returned.
 * Nothing is cached here (the page cache does that). Thread-safe.
 */
public final class LazyLayer {
  private static final long MAX_REQUEST = 16L << 20;

  private final LayerIndex index;
  private final BlobReader blob;
  private final long coalesceGap;
  private final Map<LayerChunk, CompletableFuture<VerifiedContent>> inFlight = new ConcurrentHashMap<>();
  private final java.util.concurrent.Executor decoder;
  private final java.util.concurrent.Executor transfers;

  /** A layer whose chunks are decompressed and verified on the reading thread. */
  public LazyLayer(LayerIndex index, BlobReader blob, long coalesceGap) {
    this(index, blob, coalesceGap, Runnable::run);
  }

  /** Like {@link #LazyLayer(LayerIndex, BlobReader, long, java.util.concurrent.Executor, java.util.concurrent.Executor)}
   * with requests of {@link #fetchAsync} sent on the calling thread. */
  public LazyLayer(LayerIndex index, BlobReader blob, long coalesceGap, java.util.concurrent.Executor decoder) {
    this(index, blob, coalesceGap, decoder, Runnable::run);
  }

  /**
   * @param decoder runs the decompression and verification of the chunks of one request; a pool lets a request of
   *     many chunks use several cores (the read path is CPU-bound once bytes arrive)
   * @param transfers sends the requests of {@link #fetchAsync} and reads their bodies, so that the caller can go on
   *     once the chunks it needs have arrived while the rest of a request still crosses the link
   */
  public LazyLayer(LayerIndex index, BlobReader blob, long coalesceGap, java.util.concurrent.Executor decoder,
      java.util.concurrent.Executor transfers) {
    this.index = index;
    this.blob = blob;
    this.coalesceGap = coalesceGap;
    this.decoder = decoder;
    this.transfers = transfers;
  }

  public LayerIndex index() {
    return index;
  }

  /**
   * Reads up to {@code length} bytes of the file {@code entry} (a regular file, or a hard link to one) at
   * {@code offset} into {@code dst}.
   *
   * @return the number of bytes read, 0 at or past the end of the file
   * @throws DigestMismatchException when a fetched chunk does not verify; nothing of it is returned
   */
  public int read(LayerEntry entry, long offset, byte[] dst, int dstOffset, int length) throws IOException {
    LayerEntry file = index.contentOf(entry);
    if (file.type() != EntryType.REG) {
      throw new IOException("'" + entry.name() + "' is not a regular file");
    }
    if (offset >= file.size() || length == 0) {
      return 0;
    }
    int n = (int) Math.min(length, file.size() - offset);
    List<LayerChunk> needed = covering(file, offset, n);
    Map<LayerChunk, VerifiedContent> data = fetch(file, needed);
    for (LayerChunk c : needed) {
      c.copyInto(data.get(c).bytes(), offset, n, dst, dstOffset);
    }
    return n;
  }

  /** Writes the whole content of {@code entry} to {@code out}, a window of chunks at a time. */
  public void copyTo(LayerEntry entry, OutputStream out) throws IOException {
    LayerEntry file = index.contentOf(entry);
    if (file.type() != EntryType.REG) {
      throw new IOException("'" + entry.name() + "' is not a regular file");
    }
    byte[] buf = new byte[8 << 20];
    long off = 0;
    while (off < file.size()) {
      int n = read(file, off, buf, 0, buf.length);
      out.write(buf, 0, n);
      off += n;
    }
  }

  /** The chunks of {@code file} (a regular file) overlapping {@code [offset, offset+length)}, in file order. */
  public static List<LayerChunk> covering(LayerEntry file, long offset, long length) {
    List<LayerChunk> chunks = file.chunks();
    int lo = 0;
    int hi = chunks.size() - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) >>> 1;
      if (chunks.get(mid).fileOffset() <= offset) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    List<LayerChunk> out = new ArrayList<>();
    for (int i = lo; i < chunks.size() && chunks.get(i).fileOffset() < offset + length; i++) {
      out.add(chunks.get(i));
    }
    return out;
  }

  /**
   * Fetches and verifies the given chunks of {@code file}: stored ranges close together share one request, and a chunk
   * another thread is already fetching is joined rather than fetched again. The map holds each chunk's content, as
   * {@link VerifiedContent} so that a cache can take it without hashing it again.
   */
  public Map<LayerChunk, VerifiedContent> fetch(LayerEntry file, List<LayerChunk> needed) throws IOException {
    return fetch("'" + file.name() + "'", needed);
  }

  /** Like {@link #fetch(LayerEntry, List)} for chunks of any files of this layer, coalesced across files (prefetch). */
  public Map<LayerChunk, VerifiedContent> fetchChunks(List<LayerChunk> needed) throws IOException {
    return fetch("a prefetched file", needed);
  }

  /**
   * Fetches of one read, when the bytes that arrived do not decompress or do not verify: a registry, proxy or network
   * that garbled a response once should cost a request, not an EIO. A layer whose bytes are wrong for good fails after
   * the last.
   */
  static final int CORRUPT_ATTEMPTS = 3;

  private Map<LayerChunk, VerifiedContent> fetch(String owner, List<LayerChunk> needed) throws IOException {
    for (int attempt = 1; ; attempt++) {
      try {
        return fetchOnce(owner, needed);
      } catch (DigestMismatchException | LayerFormatException corrupt) {
        if (attempt >= CORRUPT_ATTEMPTS) {
          throw corrupt;
        }
      }
    }
  }

  private Map<LayerChunk, VerifiedContent> fetchOnce(String owner, List<LayerChunk> needed) throws IOException {
    Map<LayerChunk, CompletableFuture<VerifiedContent>> futures = start(owner, needed, Runnable::run, java.util.Set.of());
    Map<LayerChunk, VerifiedContent> out = new LinkedHashMap<>();
    for (Map.Entry<LayerChunk, CompletableFuture<VerifiedContent>> e : futures.entrySet()) {
      out.put(e.getKey(), join(e.getValue()));
    }
    return out;
  }

  /**
   * Starts fetching {@code chunks} of {@code file} on the transfer threads and returns each chunk's future content at
   * once. Each chunk completes as soon as its own bytes have arrived and verified, before the rest of its request has
   * crossed the link: a read waits for the chunks it needs, not for the readahead fetched with them. A chunk that does
   * not verify completes with {@link DigestMismatchException} or {@link LayerFormatException} (fetch it again with
   * {@link #fetch(LayerEntry, List)}, which retries).
   *
   * @param urgent the chunks a read waits for: decoded on the transfer thread the moment they are in, not queued on
   *     the decoder behind readahead (queued, a needed chunk waited 10-38 ms at a cold start on 2 cores)
   */
  public Map<LayerChunk, CompletableFuture<VerifiedContent>> fetchAsync(LayerEntry file, List<LayerChunk> chunks,
      java.util.Set<LayerChunk> urgent) {
    return start("'" + file.name() + "'", chunks, transfers, urgent);
  }

  private Map<LayerChunk, CompletableFuture<VerifiedContent>> start(String owner, List<LayerChunk> needed,
      java.util.concurrent.Executor on, java.util.Set<LayerChunk> urgent) {
    Map<LayerChunk, CompletableFuture<VerifiedContent>> futures = new LinkedHashMap<>();
    List<LayerChunk> mine = new ArrayList<>();
    for (LayerChunk c : needed) {
      CompletableFuture<VerifiedContent> f = new CompletableFuture<>();
      CompletableFuture<VerifiedContent> existing = inFlight.putIfAbsent(c, f);
      // A failed fetch may not have left its slot yet (its clean-up runs after its readers wake): not joined again.
      if (existing != null && existing.isCompletedExceptionally() && inFlight.replace(c, existing, f)) {
        existing = null;
      }
      if (existing == null) {
        mine.add(c);
        futures.put(c, f);
        // Decoding may still run on the decoder: leave the single-flight slot when it is done, not before.
        f.whenComplete((v, e) -> inFlight.remove(c, f));
      } else {
        futures.put(c, existing);
      }
    }
    try {
      fetchOwned(owner, mine, futures, on, urgent);
    } catch (RuntimeException | Error e) {
      for (LayerChunk c : mine) {
        futures.get(c).completeExceptionally(new IOException("chunk fetch abandoned", e));
      }
      throw e;
    }
    return futures;
  }

  private void fetchOwned(String owner, List<LayerChunk> mine, Map<LayerChunk, CompletableFuture<VerifiedContent>> futures,
      java.util.concurrent.Executor on, java.util.Set<LayerChunk> urgent) {
    List<LayerChunk> sorted = new ArrayList<>(mine);
    sorted.sort(Comparator.comparingLong((LayerChunk c) -> c.storedOffset()));
    int i = 0;
    while (i < sorted.size()) {
      int j = i + 1;
      long start = sorted.get(i).storedOffset();
      long end = sorted.get(i).storedEnd();
      while (j < sorted.size()) {
        ByteRange next = sorted.get(j).stored();
        if (next.offset() - end > coalesceGap || Math.max(end, next.end()) - start > MAX_REQUEST) {
          break;
        }
        end = Math.max(end, next.end());
        j++;
      }
      // In the order their last bytes arrive: handed to the decoder one after another as the body comes in.
      List<LayerChunk> group = new ArrayList<>(sorted.subList(i, j));
      group.sort(Comparator.comparingLong((LayerChunk c) -> c.storedEnd()));
      ByteRange range = ByteRange.between(start, end);
      Runnable transfer = () -> transfer(owner, group, range, futures, urgent);
      try {
        on.execute(transfer);
      } catch (java.util.concurrent.RejectedExecutionException busy) {
        transfer.run();
      }
      i = j;
    }
  }

  /**
   * One request: its bytes are read as they arrive, and each chunk (in stored order) goes to the decoder as soon as
   * all of its bytes are in. A chunk handed over is not handed over again when the request is retried from its start.
   */
  private void transfer(String owner, List<LayerChunk> group, ByteRange range,
      Map<LayerChunk, CompletableFuture<VerifiedContent>> futures, java.util.Set<LayerChunk> urgent) {
    // How many chunks (a prefix of group) went to the decoder: kept across a retry from the range's start.
    int[] handed = {0};
    try {
      if (range.isEmpty()) {
        handOver(owner, group, range, new byte[0], 0, handed, futures, urgent);
        return;
      }
      blob.stream(range, body -> {
        int length = (int) range.length();
        byte[] buf = new byte[length];
        int have = 0;
        while (have < length) {
          int n = body.read(buf, have, length - have);
          if (n < 0) {
            throw new java.io.EOFException("range " + range + " of layer " + index.blob() + " truncated after "
                + have + " bytes");
          }
          have += n;
          handOver(owner, group, range, buf, have, handed, futures, urgent);
        }
        return null;
      });
    } catch (IOException | RuntimeException e) {
      IOException failure = e instanceof IOException io ? io : new IOException("fetching " + range + " failed", e);
      for (int k = handed[0]; k < group.size(); k++) {
        futures.get(group.get(k)).completeExceptionally(failure);
      }
    }
  }

  /** Hands the next chunks of {@code group} whose bytes are all among the first {@code have} of {@code buf} to the decoder. */
  private void handOver(String owner, List<LayerChunk> group, ByteRange range, byte[] buf, int have, int[] handed,
      Map<LayerChunk, CompletableFuture<VerifiedContent>> futures, java.util.Set<LayerChunk> urgent) {
    while (handed[0] < group.size() && group.get(handed[0]).storedEnd() - range.offset() <= have) {
      LayerChunk c = group.get(handed[0]++);
      CompletableFuture<VerifiedContent> f = futures.get(c);
      int at = (int) (c.storedOffset() - range.offset());
      Runnable work = () -> {
        try {
          f.complete(decode(owner, c, buf, at));
        } catch (IOException | RuntimeException e) {
          f.completeExceptionally(e);
        }
      };
      if (urgent.contains(c)) {
        work.run();
        continue;
      }
      try {
        decoder.execute(work);
      } catch (java.util.concurrent.RejectedExecutionException busy) {
        work.run();
      }
    }
  }

  private VerifiedContent decode(String owner, LayerChunk c, byte[] buf, int off) throws IOException {
    String subject = "chunk at offset " + c.fileOffset() + " of " + owner + " in layer " + index.blob();
    if (c.storedLength() == 0) {
      // A hole: zeros the verified TOC defines, nothing fetched.
      return VerifiedContent.of(new byte[(int) c.size()]);
    }
    int len = (int) c.storedLength();
    byte[] data;
    try {
      data = index.compression() == ChunkCompression.GZIP
          ? GzipChunks.inflate(buf, off, len, c.innerOffset(), (int) c.size())
          : read(buf, off, len, c);
    } catch (IOException e) {
      throw new LayerFormatException(subject + " cannot be decompressed: " + e.getMessage(), e);
    }
    if (data.length != c.size()) {
      throw new LayerFormatException(subject + " decompressed to " + data.length + " bytes, expected " + c.size());
    }
    return VerifiedContent.check(c.digest(), subject, data);
  }

  /** A chunk's content read from a stream over its stored bytes (gzip has {@link GzipChunks}). */
  private byte[] read(byte[] buf, int off, int len, LayerChunk c) throws IOException {
    ByteArrayInputStream raw = new ByteArrayInputStream(buf, off, len);
    // Each zstd stream takes an input buffer of about 128 KiB: from the recycling pool, not a new one per chunk (50 MB
    // of the 300-540 MB the FUSE manager allocated in a cold start of the python image, by JFR's samples).
    try (InputStream in = index.compression() == ChunkCompression.ZSTD
        ? new ZstdInputStreamNoFinalizer(raw, RecyclingBufferPool.INSTANCE) : raw) {
      in.skipNBytes(c.innerOffset());
      return in.readNBytes((int) c.size());
    }
  }

  /** The content of a chunk {@link #fetchAsync} started, with its failure as the fetch would have thrown it. */
  public static VerifiedContent join(CompletableFuture<VerifiedContent> f) throws IOException {
    try {
      return f.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("interrupted waiting for a chunk");
    } catch (CancellationException e) {
      throw new IOException("chunk fetch cancelled", e);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof DigestMismatchException d) {
        throw new DigestMismatchException(d.subject(), d.expected(), d.actual());
      }
      if (cause instanceof IOException io) {
        throw io;
      }
      throw new IOException(cause);
    }
  }
}
