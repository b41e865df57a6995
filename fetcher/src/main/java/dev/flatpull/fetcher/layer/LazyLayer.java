package dev.flatpull.fetcher.layer;

import com.github.luben.zstd.ZstdInputStream;
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
import java.util.zip.GZIPInputStream;

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

  /** A layer whose chunks are decompressed and verified on the reading thread. */
  public LazyLayer(LayerIndex index, BlobReader blob, long coalesceGap) {
    this(index, blob, coalesceGap, Runnable::run);
  }

  /**
   * @param decoder runs the decompression and verification of the chunks of one request; a pool lets a request of
   *     many chunks use several cores (the read path is CPU-bound once bytes arrive)
   */
  public LazyLayer(LayerIndex index, BlobReader blob, long coalesceGap, java.util.concurrent.Executor decoder) {
    this.index = index;
    this.blob = blob;
    this.coalesceGap = coalesceGap;
    this.decoder = decoder;
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
      byte[] bytes = data.get(c).bytes();
      long from = Math.max(offset, c.fileOffset());
      long to = Math.min(offset + n, c.fileEnd());
      System.arraycopy(bytes, (int) (from - c.fileOffset()), dst, dstOffset + (int) (from - offset), (int) (to - from));
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
    Map<LayerChunk, CompletableFuture<VerifiedContent>> futures = new LinkedHashMap<>();
    List<LayerChunk> mine = new ArrayList<>();
    for (LayerChunk c : needed) {
      CompletableFuture<VerifiedContent> f = new CompletableFuture<>();
      CompletableFuture<VerifiedContent> existing = inFlight.putIfAbsent(c, f);
      if (existing == null) {
        mine.add(c);
        futures.put(c, f);
      } else {
        futures.put(c, existing);
      }
    }
    try {
      fetchOwned(owner, mine, futures);
    } catch (RuntimeException | Error e) {
      for (LayerChunk c : mine) {
        futures.get(c).completeExceptionally(new IOException("chunk fetch abandoned", e));
      }
      throw e;
    } finally {
      // Decoding may still run on the decoder: leave the single-flight slot when it is done, not before.
      for (LayerChunk c : mine) {
        CompletableFuture<VerifiedContent> f = futures.get(c);
        f.whenComplete((v, e) -> inFlight.remove(c, f));
      }
    }
    Map<LayerChunk, VerifiedContent> out = new LinkedHashMap<>();
    for (Map.Entry<LayerChunk, CompletableFuture<VerifiedContent>> e : futures.entrySet()) {
      out.put(e.getKey(), join(e.getValue()));
    }
    return out;
  }

  private void fetchOwned(String owner, List<LayerChunk> mine, Map<LayerChunk, CompletableFuture<VerifiedContent>> futures) {
    List<LayerChunk> sorted = new ArrayList<>(mine);
    sorted.sort(Comparator.comparingLong((LayerChunk c) -> c.stored().offset()));
    int i = 0;
    while (i < sorted.size()) {
      int j = i + 1;
      long start = sorted.get(i).stored().offset();
      long end = sorted.get(i).stored().end();
      while (j < sorted.size()) {
        ByteRange next = sorted.get(j).stored();
        if (next.offset() - end > coalesceGap || Math.max(end, next.end()) - start > MAX_REQUEST) {
          break;
        }
        end = Math.max(end, next.end());
        j++;
      }
      List<LayerChunk> group = sorted.subList(i, j);
      byte[] bytes = null;
      IOException failure = null;
      if (end > start) {
        try {
          bytes = blob.read(ByteRange.between(start, end));
        } catch (IOException e) {
          failure = e;
        }
      }
      for (LayerChunk c : group) {
        CompletableFuture<VerifiedContent> f = futures.get(c);
        if (failure != null) {
          f.completeExceptionally(failure);
          continue;
        }
        byte[] fetched = bytes;
        int at = (int) (c.stored().offset() - start);
        Runnable work = () -> {
          try {
            f.complete(decode(owner, c, fetched, at));
          } catch (IOException | RuntimeException e) {
            f.completeExceptionally(e);
          }
        };
        try {
          decoder.execute(work);
        } catch (java.util.concurrent.RejectedExecutionException busy) {
          work.run();
        }
      }
      i = j;
    }
  }

  private VerifiedContent decode(String owner, LayerChunk c, byte[] buf, int off) throws IOException {
    String subject = "chunk at offset " + c.fileOffset() + " of " + owner + " in layer " + index.blob();
    if (c.stored().isEmpty()) {
      // A hole: zeros the verified TOC defines, nothing fetched.
      return VerifiedContent.of(new byte[(int) c.size()]);
    }
    int len = (int) c.stored().length();
    byte[] data;
    try (InputStream in = open(buf, off, len)) {
      in.skipNBytes(c.innerOffset());
      data = in.readNBytes((int) c.size());
    } catch (DigestMismatchException e) {
      throw e;
    } catch (IOException e) {
      throw new LayerFormatException(subject + " cannot be decompressed: " + e.getMessage(), e);
    }
    if (data.length != c.size()) {
      throw new LayerFormatException(subject + " decompressed to " + data.length + " bytes, expected " + c.size());
    }
    return VerifiedContent.check(c.digest(), subject, data);
  }

  private InputStream open(byte[] buf, int off, int len) throws IOException {
    ByteArrayInputStream raw = new ByteArrayInputStream(buf, off, len);
    return switch (index.compression()) {
      case GZIP -> new GZIPInputStream(raw, 64 * 1024);
      case ZSTD -> new ZstdInputStream(raw);
      case NONE, ZEROS -> raw;
    };
  }

  private static VerifiedContent join(CompletableFuture<VerifiedContent> f) throws IOException {
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
