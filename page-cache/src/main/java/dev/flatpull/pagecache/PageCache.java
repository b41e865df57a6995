package dev.flatpull.pagecache;

import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import dev.flatpull.config.CacheSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.VerifiedContent;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Function;

/**
 * The host-wide cache of verified content, keyed by content digest (a chunk's {@code chunkDigest}), so that content
 * shared by layers and images is stored and fetched once. A small memory tier (weighted by bytes) sits over a
 * crash-safe disk tier. Nothing enters without matching its digest, and disk content is verified again when read.
 *
 * <p>Misses are single-flight: concurrent {@link #getOrLoad} calls for one digest run one loader. A producer that will
 * supply an entry soon can {@link #reserve} it; readers then wait for it (up to the reservation wait) rather than
 * fetch it themselves.
 *
 * <p>Content loaded on a read miss reaches readers from memory at once; its disk copy is written behind, on the
 * cache's own writer thread, so that a disk write never delays a read. {@link #put} writes through. Thread-safe;
 * {@link #close} waits for pending disk writes.
 */
public final class PageCache implements AutoCloseable {
  /** What readers see when a producer gives a reservation up. */
  private static final class Abandoned extends IOException {
    Abandoned() {
      super("reservation abandoned");
    }
  }

  private final Cache<Digest, byte[]> memory;
  private final DiskTier disk;
  private final Duration reservationWait;
  private final ConcurrentHashMap<Digest, CompletableFuture<byte[]>> pending = new ConcurrentHashMap<>();
  // Reserved entries and the progress of their producers (NO_PROGRESS: a reader's own fetch, waited for in full).
  private final ConcurrentHashMap<Digest, ProducerProgress> reserved = new ConcurrentHashMap<>();
  // Reserved entries a reader has waited for: their content is wanted now, whoever produces it.
  private final java.util.Set<Digest> waitedFor = ConcurrentHashMap.newKeySet();
  private static final ProducerProgress NO_PROGRESS = new ProducerProgress(Duration.ofDays(1));
  // Content queued for its disk write: visible here until the disk has it, so that a memory tier that already
  // evicted it (or has no room at all) never makes stored content miss and be fetched again.
  private final ConcurrentHashMap<Digest, byte[]> writing = new ConcurrentHashMap<>();
  private final LongAdder memoryHits = new LongAdder();
  private final LongAdder diskHits = new LongAdder();
  private final LongAdder misses = new LongAdder();
  private final LongAdder loads = new LongAdder();
  private final LongAdder reservationHits = new LongAdder();
  private final LongAdder diskWriteFailures = new LongAdder();
  private final LongAdder writeBehindWaits = new LongAdder();
  private final LongAdder diskWritesSkipped = new LongAdder();
  private final java.util.concurrent.ExecutorService writer;
  private final java.util.concurrent.atomic.AtomicLong pendingWrites = new java.util.concurrent.atomic.AtomicLong();
  // Bytes queued for the disk, bounded: a producer faster than the disk (a runtime-image stream) waits here instead
  // of filling the heap.
  private final java.util.concurrent.Semaphore writeBehind;
  private final int writeBehindBytes;

  /** @param writer runs the disk writes, one at a time (tests pass one that holds them: a disk slower than anything) */
  PageCache(Cache<Digest, byte[]> memory, DiskTier disk, Duration reservationWait, int writeBehindBytes,
      java.util.concurrent.ExecutorService writer) {
    this.memory = memory;
    this.disk = disk;
    this.reservationWait = reservationWait;
    this.writeBehindBytes = writeBehindBytes;
    this.writeBehind = new java.util.concurrent.Semaphore(writeBehindBytes);
    this.writer = writer;
  }

  /** The writer thread of a cache: a single daemon thread, so that disk writes never compete with each other. */
  static java.util.concurrent.ExecutorService writerThread() {
    return writerThread(dev.flatpull.core.DaemonThreads::named);
  }

  private static java.util.concurrent.ExecutorService writerThread(Function<String, ThreadFactory> threads) {
    return java.util.concurrent.Executors.newSingleThreadExecutor(threads.apply("flatpull-page-cache-writer"));
  }

  /**
   * Opens (creating if needed) the cache in {@code directory}, deleting an earlier process's unfinished writes. What
   * it stored is found in the background, from its packs' indexes (a lookup waits for that; the disk's counts are short
   * of it until it is done).
   */
  public static PageCache open(Path directory, CacheSettings settings) throws IOException {
    return open(directory, settings, java.util.concurrent.CompletableFuture.completedFuture(null));
  }

  /**
   * Like {@link #open(Path, CacheSettings)}, the listing begun only once {@code listingMayStart} completes: a FUSE
   * manager taking running containers' mounts over lists after that, so that the listing's CPU (0.3-1.2 s for 20,000
   * entries on a busy 2-core node) is not on the pause those containers see.
   */
  public static PageCache open(Path directory, CacheSettings settings,
      java.util.concurrent.CompletionStage<?> listingMayStart) throws IOException {
    return open(directory, settings, listingMayStart, dev.flatpull.core.DaemonThreads::named);
  }

  /**
   * Like {@link #open(Path, CacheSettings, java.util.concurrent.CompletionStage)}, with the cache's own threads (the
   * disk writer and the listing: nothing a read waits for) made by {@code threads}, given each thread's name: a FUSE
   * manager runs them at a low CPU priority.
   */
  public static PageCache open(Path directory, CacheSettings settings,
      java.util.concurrent.CompletionStage<?> listingMayStart, Function<String, ThreadFactory> threads)
      throws IOException {
    Cache<Digest, byte[]> memory =
        Caffeine.newBuilder()
            .maximumWeight(settings.memoryBytes())
            .weigher((Digest d, byte[] b) -> b.length)
            .build();
    DiskTier disk = DiskTier.open(directory, settings.diskBytes(), listingMayStart,
        threads.apply(DiskTier.RESTORE_THREAD));
    return new PageCache(memory, disk, settings.reservationWait(), WRITE_BEHIND_BYTES, writerThread(threads));
  }

  /** Files kept beside the content, in the disk tier's budget (a layer's parsed index). */
  public dev.flatpull.core.NamedFiles namedFiles() {
    return disk;
  }

  /** At most this many bytes wait for their disk write at any time. */
  public static final int WRITE_BEHIND_BYTES = 64 << 20;

  /** Whether verified content of {@code digest} is on this node (memory or disk); not counted as a lookup. */
  public boolean contains(Digest digest) {
    return memory.getIfPresent(digest) != null || writing.containsKey(digest) || disk.contains(digest);
  }

  /**
   * Verified content of {@code digest}, as {@link #get} finds it, but neither counted as a lookup nor promoted from
   * disk to memory: for a pass over a whole layer (its diff_id check), which must not evict what services read.
   */
  public Optional<byte[]> peek(Digest digest) throws IOException {
    byte[] b = memory.getIfPresent(digest);
    if (b == null) {
      b = writing.get(digest);
    }
    return b != null ? Optional.of(b) : disk.get(digest);
  }

  /** Verified content of {@code digest}, from memory or disk; empty on a miss. */
  public Optional<byte[]> get(Digest digest) throws IOException {
    Optional<byte[]> hit = lookup(digest);
    if (hit.isEmpty()) {
      misses.increment();
    }
    return hit;
  }

  private Optional<byte[]> lookup(Digest digest) throws IOException {
    byte[] b = memory.getIfPresent(digest);
    if (b != null) {
      memoryHits.increment();
      return Optional.of(b);
    }
    b = writing.get(digest);
    if (b != null) {
      memoryHits.increment();
      return Optional.of(b);
    }
    Optional<byte[]> d = disk.get(digest);
    if (d.isPresent()) {
      diskHits.increment();
      memory.put(digest, d.get());
      return d;
    }
    return Optional.empty();
  }

  /**
   * The content of {@code digest}: cached, or supplied by a reservation's producer, or loaded once by
   * {@code loader} however many threads ask at the same time.
   *
   * @throws DigestMismatchException when the loaded content does not match {@code digest}; nothing is stored
   * @throws IOException whatever the loader threw
   */
  public byte[] getOrLoad(Digest digest, ContentLoader loader) throws IOException {
    while (true) {
      Optional<byte[]> hit = get(digest);
      if (hit.isPresent()) {
        return hit.get();
      }
      CompletableFuture<byte[]> mine = new CompletableFuture<>();
      CompletableFuture<byte[]> theirs = pending.putIfAbsent(digest, mine);
      if (theirs != null) {
        ProducerProgress progress = reserved.get(digest);
        boolean reservation = progress != null;
        if (reservation) {
          waitedFor.add(digest);
        }
        try {
          byte[] b = await(theirs, progress);
          if (reservation) {
            reservationHits.increment();
          }
          return b;
        } catch (Abandoned | TimeoutException e) {
          // The producer gave up or is too slow: fetch it ourselves, without a second single-flight slot.
          return store(digest, loadVerified(digest, loader), WhenFull.SKIP);
        } finally {
          if (reservation) {
            // After the fill looked (it completes what we waited for only then), and also when the reservation was
            // released before this reader marked it: no mark outlives its wait.
            waitedFor.remove(digest);
          }
        }
      }
      try {
        // Someone may have stored it between our lookup and taking the slot.
        byte[] b = lookup(digest).orElse(null);
        if (b == null) {
          b = store(digest, loadVerified(digest, loader), WhenFull.SKIP);
        }
        mine.complete(b);
        return b;
      } catch (IOException | RuntimeException e) {
        mine.completeExceptionally(e);
        throw e;
      } finally {
        pending.remove(digest, mine);
      }
    }
  }

  private byte[] loadVerified(Digest digest, ContentLoader loader) throws IOException {
    loads.increment();
    return ofDigest(digest, loader.load(), "loaded content");
  }

  /** The bytes of {@code content}, which was verified when made, provided it is the content of {@code digest}. */
  private static byte[] ofDigest(Digest digest, VerifiedContent content, String subject) throws DigestMismatchException {
    if (!content.digest().equals(digest)) {
      throw new DigestMismatchException(subject, digest, content.digest());
    }
    return content.bytes();
  }

  /**
   * Waits for another thread's load ({@code progress} null: until it ends) or for a reservation: up to the reservation
   * wait in all, and only while its producer advances at least once per stall.
   */
  private byte[] await(CompletableFuture<byte[]> f, ProducerProgress progress) throws IOException, TimeoutException {
    try {
      if (progress == null) {
        return f.get();
      }
      long left = reservationWait.toNanos();
      long slice = Math.min(progress.stall().toNanos(), left);
      long seen = progress.mark();
      while (true) {
        try {
          return f.get(slice, TimeUnit.NANOSECONDS);
        } catch (TimeoutException t) {
          left -= slice;
          long now = progress.mark();
          if (left <= 0 || now == seen) {
            throw t;
          }
          seen = now;
          slice = Math.min(slice, left);
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted waiting for a cache entry");
    } catch (ExecutionException e) {
      if (e.getCause() instanceof IOException io) {
        throw io;
      }
      throw new IOException(e.getCause());
    }
  }

  /** Verifies and stores content supplied from elsewhere (it must match {@code digest}), on disk before returning. */
  public void put(Digest digest, byte[] content) throws IOException {
    byte[] verified = VerifiedContent.check(digest, "content put into the page cache", content).bytes();
    memory.put(digest, verified);
    disk.put(digest, verified);
  }

  /** What a store does when the write-behind queue is full. */
  private enum WhenFull {
    /** A reader's miss: it never waits on the disk; its content stays in memory only, counted. */
    SKIP,
    /**
     * A producer that a start waits for (a runtime-image stream, a read's readahead filling reservations): it writes its
     * content itself, which paces it to the disk's speed. It does not wait for the writer thread, which runs at a low
     * CPU priority in the FUSE manager: on a node whose cores are busy that would pace the stream by the one thread
     * the node gives least.
     */
    WRITE_HERE,
    /** Content for later (the background fetch): it waits for the writer thread, paced by it. */
    WAIT
  }

  /**
   * Makes verified content visible in memory now and stored on disk soon, off the caller's thread; {@code full} says
   * what happens when the write-behind queue is full.
   */
  private byte[] store(Digest digest, byte[] content, WhenFull full) {
    memory.put(digest, content);
    writeBehind(digest, content, full);
    return content;
  }

  /**
   * Content for later, which no reader has asked for (a layer fetched whole in the background): stored on disk, and
   * visible from the write-behind queue until the disk has it, but kept out of the memory tier. A read of it later
   * finds it on disk (verified again) and brings it into memory then. Before this, fetching a layer whole filled the
   * memory tier, and so the heap's old generation, with content nobody read: collections inside a starting service
   * copied it (docs/benchmarks.md, "Memory").
   */
  private void storeForLater(Digest digest, byte[] content) {
    if (!writeBehind(digest, content, WhenFull.WAIT)) {
      // Interrupted while waiting for the disk, or the writer is closed: memory is the only place left for it.
      memory.put(digest, content);
    }
  }

  /**
   * Queues {@code content}'s disk write, or at a full queue does what {@code full} says; false when the disk will not
   * have it (the content stays where the caller put it, or in memory only: see {@link #storeForLater}).
   */
  private boolean writeBehind(Digest digest, byte[] content, WhenFull full) {
    int permits = Math.min(content.length, writeBehindBytes);
    if (!writeBehind.tryAcquire(permits)) {
      if (full == WhenFull.SKIP) {
        diskWritesSkipped.increment();
        return false;
      }
      writeBehindWaits.increment();
      if (full == WhenFull.WRITE_HERE) {
        writeNow(digest, content);
        return true;
      }
      try {
        writeBehind.acquire(permits);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      }
    }
    writing.put(digest, content);
    pendingWrites.incrementAndGet();
    try {
      writer.execute(() -> {
        try {
          writeNow(digest, content);
        } finally {
          writing.remove(digest, content);
          pendingWrites.decrementAndGet();
          writeBehind.release(permits);
        }
      });
      return true;
    } catch (java.util.concurrent.RejectedExecutionException closed) {
      writing.remove(digest, content);
      pendingWrites.decrementAndGet();
      writeBehind.release(permits);
      return false;
    }
  }

  /**
   * Writes {@code content} to the disk on the calling thread. A failure is counted, not thrown: the content stays in
   * memory (if it was put there) and will be fetched again after a restart, a cost, not an error.
   */
  private void writeNow(Digest digest, byte[] content) {
    try {
      disk.put(digest, content);
    } catch (IOException | RuntimeException e) {
      diskWriteFailures.increment();
    }
  }

  /** What {@link #empty} removed: entries and bytes on disk, and entries that were in memory. */
  public record Emptied(long diskEntries, long diskBytes, long memoryEntries) {}

  /**
   * Removes every stored entry, from memory and disk, so that the next read of any content goes to its producer (a
   * benchmark's cold start on a running node, or reclaiming the disk). Content being produced now (reservations,
   * loads in flight) is not affected and lands as usual. Safe while layers are served: their reads fetch again.
   */
  public Emptied empty() throws IOException {
    awaitWrites();
    long inMemory = memory.estimatedSize();
    memory.invalidateAll();
    long[] removed = disk.clear();
    return new Emptied(removed[0], removed[1], inMemory);
  }

  /** What {@link #check} found on disk: entries whose content matches their digest, and those that do not. */
  public record Checked(long entries, long corrupt) {}

  /**
   * Reads every entry stored on disk in {@code directory} and checks it against its digest, changing nothing, while
   * another process may own the cache: what crashes and kills leave behind (a read of the cache would forget a corrupt
   * entry; this counts it).
   */
  public static Checked check(Path directory) throws IOException {
    return DiskTier.check(directory);
  }

  /** Waits until the content an earlier process stored is known (found in the background after the open). */
  void awaitRestored() throws InterruptedIOException {
    disk.awaitRestored();
  }

  /** Waits until every disk write queued so far is done (or failed). */
  public void awaitWrites() throws InterruptedIOException {
    try {
      writer.submit(() -> {}).get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted waiting for page-cache writes");
    } catch (ExecutionException | java.util.concurrent.RejectedExecutionException e) {
      // Nothing to wait for.
    }
  }

  /** Waits for pending disk writes, then stops the writer. */
  @Override
  public void close() throws InterruptedIOException {
    awaitWrites();
    writer.shutdown();
    disk.close();
  }

  /**
   * Reserves {@code digest} for a producer. Empty when the content is already cached or someone is already producing
   * it; the caller then has nothing to supply.
   */
  public Optional<Reservation> reserve(Digest digest) throws IOException {
    return reserve(digest, NO_PROGRESS);
  }

  /**
   * Like {@link #reserve(Digest)}, for a producer that fills many entries in turn: readers wait only while
   * {@code progress} advances (see {@link ProducerProgress}).
   */
  public Optional<Reservation> reserve(Digest digest, ProducerProgress progress) throws IOException {
    return reserve(digest, progress, false);
  }

  /**
   * Like {@link #reserve(Digest)}, for a producer that fetches content ahead of any read (a layer fetched whole in the
   * background): unless a reader waited for it, its content goes to disk only, not into the memory tier.
   */
  public Optional<Reservation> reserveForLater(Digest digest) throws IOException {
    return reserve(digest, NO_PROGRESS, true);
  }

  private Optional<Reservation> reserve(Digest digest, ProducerProgress progress, boolean forLater)
      throws IOException {
    if (contains(digest)) {
      return Optional.empty();
    }
    CompletableFuture<byte[]> f = new CompletableFuture<>();
    if (pending.putIfAbsent(digest, f) != null) {
      return Optional.empty();
    }
    reserved.put(digest, progress);
    return Optional.of(new Reservation() {
      @Override
      public void fill(VerifiedContent content) throws DigestMismatchException {
        try {
          byte[] bytes = ofDigest(digest, content, "reserved content");
          if (forLater && !waitedFor.contains(digest)) {
            storeForLater(digest, bytes);
          } else {
            store(digest, bytes, WhenFull.WRITE_HERE);
          }
          f.complete(bytes);
        } catch (DigestMismatchException e) {
          abandon();
          throw e;
        } finally {
          release();
        }
      }

      @Override
      public void abandon() {
        f.completeExceptionally(new Abandoned());
        release();
      }

      private void release() {
        reserved.remove(digest);
        waitedFor.remove(digest);
        pending.remove(digest, f);
      }
    });
  }

  /** Counters; disk figures include writes still pending only once they are done (see {@link #awaitWrites}). */
  public CacheStats stats() {
    return new CacheStats(
        memoryHits.sum(), diskHits.sum(), misses.sum(), loads.sum(), reservationHits.sum(), disk.corrupt.sum(),
        disk.evictions.sum(), disk.entries(), disk.bytes(), diskWriteFailures.sum(), writeBehindWaits.sum(),
        diskWritesSkipped.sum(), writeBehindBytes - writeBehind.availablePermits());
  }
}
