package dev.flatpull.pagecache;

import dev.flatpull.core.Digest;
import dev.flatpull.core.NamedFiles;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * Content-addressed files under {@code DIR/sha256/HEX}. Writes go to {@code DIR/tmp}, then are renamed into place (an
 * existing destination is kept: same digest, same content), so a killed process leaves either no entry or a complete
 * one; leftovers in {@code tmp} are deleted on open. Writes are not fsynced: every read re-verifies the content and
 * deletes an entry that does not match (disk corruption, a file written by something else, or one that a power loss
 * left short), so an entry the disk lost costs a fetch, never a wrong byte, and an fsync per chunk (hundreds in a cold
 * start, each a journal commit while the service reads the same disk) would buy nothing. Least recently used entries
 * are evicted beyond the budget. Thread-safe.
 *
 * <p>Files kept under names of their own ({@link NamedFiles}: derived data such as a layer's parsed index) live under
 * {@code DIR/named/NAME}, written and renamed the same way, and count in the same budget and recency order.
 */
final class DiskTier implements NamedFiles {
  private static final java.util.logging.Logger LOG = java.util.logging.Logger.getLogger(DiskTier.class.getName());

  private record Entry(long size, long lastUsed) {}

  // A named file's name: one path component, nothing the directory could be escaped or hidden with.
  private static final java.util.regex.Pattern NAME = java.util.regex.Pattern.compile("[a-z0-9][a-z0-9._-]{0,199}");

  private final Path blobs;
  private final Path named;
  private final Path tmp;
  private final long budget;
  private final Map<Digest, Entry> index = new ConcurrentHashMap<>();
  private final Map<String, Entry> namedIndex = new ConcurrentHashMap<>();
  private final AtomicLong bytes = new AtomicLong();
  private final java.util.concurrent.CountDownLatch restored = new java.util.concurrent.CountDownLatch(1);
  private volatile boolean closed;
  private final AtomicLong clock = new AtomicLong();
  final LongAdder corrupt = new LongAdder();
  final LongAdder evictions = new LongAdder();

  /**
   * Opens the tier in {@code dir}: named files are known when this returns, stored content is found in the background
   * ({@link #restore}).
   */
  static DiskTier open(Path dir, long budget) throws IOException {
    return open(dir, budget, DiskTier::restoreThread);
  }

  /** The name of the listing's thread. */
  static final String RESTORE_THREAD = "flatpull-page-cache-restore";

  /** Runs the listing on a thread of its own. */
  static void restoreThread(Runnable task) {
    dev.flatpull.core.DaemonThreads.named(RESTORE_THREAD).newThread(task).start();
  }

  /** @param restorer runs the restore (tests pass one that holds it: a disk slower than anything) */
  static DiskTier open(Path dir, long budget, java.util.concurrent.Executor restorer) throws IOException {
    DiskTier tier = new DiskTier(dir, budget);
    restorer.execute(tier::restore);
    return tier;
  }

  private DiskTier(Path dir, long budget) throws IOException {
    this.blobs = dir.resolve("sha256");
    this.named = dir.resolve("named");
    this.tmp = dir.resolve("tmp");
    this.budget = budget;
    // 0700 and entries 0600: a file the image makes 0600 must not be readable from the cache by another user.
    dev.flatpull.core.OwnerOnly.directory(dir);
    dev.flatpull.core.OwnerOnly.directory(blobs);
    dev.flatpull.core.OwnerOnly.directory(named);
    dev.flatpull.core.OwnerOnly.directory(tmp);
    try (DirectoryStream<Path> leftovers = Files.newDirectoryStream(tmp)) {
      for (Path p : leftovers) {
        Files.deleteIfExists(p);
      }
    }
    // Named files are few (a layer's index each) and a takeover looks them up at once: found before this returns.
    for (Found f : listOldestFirst(named)) {
      String name = f.path().getFileName().toString();
      if (!NAME.matcher(name).matches() || !f.regular()) {
        Files.deleteIfExists(f.path());
        continue;
      }
      namedIndex.put(name, new Entry(f.size(), clock.incrementAndGet()));
      bytes.addAndGet(f.size());
    }
  }

  /** A file found in a directory, with the attributes read once: a sort that stats per comparison costs seconds. */
  private record Found(Path path, long mtime, long size, boolean regular) {}

  /** The files of {@code dir}, oldest modification first: the recency order before the restart, roughly. */
  private static List<Found> listOldestFirst(Path dir) throws IOException {
    List<Found> found = new ArrayList<>();
    try (DirectoryStream<Path> files = Files.newDirectoryStream(dir)) {
      for (Path p : files) {
        try {
          BasicFileAttributes a = Files.readAttributes(p, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
          found.add(new Found(p, a.lastModifiedTime().toMillis(), a.size(), a.isRegularFile()));
        } catch (NoSuchFileException gone) {
          // removed meanwhile (evicted, or emptied)
        }
      }
    }
    found.sort(Comparator.comparingLong(Found::mtime));
    return found;
  }

  /**
   * Finds the content an earlier process stored, on a thread of its own: a node's cache holds tens or hundreds of
   * thousands of chunk files, and listing them before serving held a manager's start (and a takeover of running
   * containers' mounts) for about a second per 17,000 (read once per file now, 0.3-1.2 s under load). Until it is
   * done, a lookup the index cannot answer looks at the disk, the budget counts only what is known, and the entries
   * found get a recency older than anything used since the open (negative clock values, in the order found).
   */
  private void restore() {
    long started = System.nanoTime();
    try {
      List<Found> found = listOldestFirst(blobs);
      long age = -found.size();
      long entries = 0;
      long size = 0;
      for (Found f : found) {
        age++;
        if (closed) {
          return;
        }
        Digest d = digestOf(f.path());
        if (d == null || !f.regular()) {
          try {
            Files.deleteIfExists(f.path());
          } catch (IOException e) {
            // A stranger the cache cannot remove (a directory with content, say) is left; the rest is still found.
            LOG.warning("page cache: " + f.path() + " is not an entry and could not be removed: " + e);
          }
          continue;
        }
        // An entry stored or read since the open is known better than the listing knows it. One deleted since the
        // listing (evicted, or found corrupt) is put back here: its next read finds it gone and forgets it.
        if (index.putIfAbsent(d, new Entry(f.size(), age)) == null) {
          bytes.addAndGet(f.size());
        }
        entries++;
        size += f.size();
      }
      long ms = (System.nanoTime() - started) / 1_000_000;
      // A new cache (every throwaway one of a warm-up) has nothing to say.
      LOG.log(entries > 0 ? java.util.logging.Level.INFO : java.util.logging.Level.FINE, String.format(
          "page cache: found %,d entries (%,d MiB) stored before, in %d ms", entries, size >> 20, ms));
    } catch (IOException | RuntimeException e) {
      LOG.warning("page cache: finding the content stored in " + blobs + " failed (it is fetched again when read): "
          + e);
    } finally {
      restored.countDown();
    }
    evictBeyondBudget();
  }

  /** Stops a restore still under way (the cache is closed). */
  void close() {
    closed = true;
  }

  /** Waits until what an earlier process stored is known (tests, and {@link #clear}, which must see all of it). */
  void awaitRestored() throws java.io.InterruptedIOException {
    try {
      restored.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("interrupted waiting for the page cache's restore");
    }
  }

  private boolean restoring() {
    return restored.getCount() > 0;
  }

  private Path namedPath(String name) {
    if (!NAME.matcher(name).matches()) {
      throw new IllegalArgumentException("not a name for a kept file: '" + name + "'");
    }
    return named.resolve(name);
  }

  @Override
  public Optional<Path> find(String name) {
    Path p = namedPath(name);
    if (namedIndex.computeIfPresent(name, (k, e) -> new Entry(e.size, clock.incrementAndGet())) == null) {
      return Optional.empty();
    }
    if (!Files.exists(p)) {
      forgetNamed(name);
      return Optional.empty();
    }
    return Optional.of(p);
  }

  @Override
  public void keep(String name, Writer writer) throws IOException {
    Path target = namedPath(name);
    Path temp = tmp.resolve(name + "." + Long.toHexString(ThreadLocalRandom.current().nextLong()));
    try {
      try (FileChannel ch = FileChannel.open(temp, java.util.Set.of(StandardOpenOption.CREATE_NEW,
          StandardOpenOption.READ, StandardOpenOption.WRITE), dev.flatpull.core.OwnerOnly.file())) {
        writer.write(ch);
      }
      long size = Files.size(temp);
      synchronized (this) {
        Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        Entry old = namedIndex.put(name, new Entry(size, clock.incrementAndGet()));
        bytes.addAndGet(size - (old == null ? 0 : old.size));
      }
    } finally {
      Files.deleteIfExists(temp);
    }
    evictBeyondBudget();
  }

  @Override
  public synchronized void remove(String name) throws IOException {
    Files.deleteIfExists(namedPath(name));
    forgetNamed(name);
  }

  private void forgetNamed(String name) {
    Entry e = namedIndex.remove(name);
    if (e != null) {
      bytes.addAndGet(-e.size);
    }
  }

  private static Digest digestOf(Path p) {
    try {
      return new Digest("sha256", p.getFileName().toString());
    } catch (IllegalArgumentException notAnEntry) {
      return null;
    }
  }

  private Path path(Digest d) {
    return blobs.resolve(d.hex());
  }

  boolean contains(Digest d) {
    return index.containsKey(d) || restoring() && "sha256".equals(d.algorithm()) && Files.isRegularFile(path(d),
        LinkOption.NOFOLLOW_LINKS);
  }

  /** The verified content of {@code d}, or empty when absent or corrupt (a corrupt entry is deleted). */
  Optional<byte[]> get(Digest d) throws IOException {
    if (!"sha256".equals(d.algorithm()) || !index.containsKey(d) && !restoring()) {
      return Optional.empty();
    }
    byte[] content;
    try {
      content = Files.readAllBytes(path(d));
    } catch (NoSuchFileException gone) {
      forget(d);
      return Optional.empty();
    }
    if (!d.recompute(content, 0, content.length).equals(d)) {
      corrupt.increment();
      Files.deleteIfExists(path(d));
      forget(d);
      return Optional.empty();
    }
    if (index.computeIfPresent(d, (k, e) -> new Entry(e.size, clock.incrementAndGet())) == null && restoring()
        && index.putIfAbsent(d, new Entry(content.length, clock.incrementAndGet())) == null) {
      // found on disk before the restore came to it
      bytes.addAndGet(content.length);
    }
    return Optional.of(content);
  }

  /** Stores verified content (in the kernel's hands when this returns; see the class comment); a no-op when the entry exists. */
  void put(Digest d, byte[] content) throws IOException {
    if (!"sha256".equals(d.algorithm()) || contains(d)) {
      return;
    }
    Path target = path(d);
    Path temp = tmp.resolve(d.hex() + "." + Long.toHexString(ThreadLocalRandom.current().nextLong()));
    try (FileChannel ch = FileChannel.open(temp, java.util.Set.of(StandardOpenOption.CREATE_NEW,
        StandardOpenOption.WRITE), dev.flatpull.core.OwnerOnly.file())) {
      ByteBuffer buf = ByteBuffer.wrap(content);
      while (buf.hasRemaining()) {
        ch.write(buf);
      }
    }
    try {
      if (Files.exists(target)) {
        Files.delete(temp);
      } else {
        Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE);
      }
    } catch (FileAlreadyExistsException | AtomicMoveNotSupportedException e) {
      Files.deleteIfExists(temp);
    }
    if (index.putIfAbsent(d, new Entry(content.length, clock.incrementAndGet())) == null) {
      bytes.addAndGet(content.length);
    }
    evictBeyondBudget();
  }

  private void forget(Digest d) {
    Entry e = index.remove(d);
    if (e != null) {
      bytes.addAndGet(-e.size);
    }
  }

  private void evictBeyondBudget() {
    if (bytes.get() <= budget) {
      return;
    }
    synchronized (this) {
      if (bytes.get() <= budget) {
        return;
      }
      // Evict down to 90% so that eviction does not run on every insert at the limit.
      long target = budget - budget / 10;
      // Content and named files in one recency order: the budget is the node's disk, whatever fills it.
      List<Map.Entry<?, Entry>> byAge = new ArrayList<>();
      byAge.addAll(index.entrySet());
      byAge.addAll(namedIndex.entrySet());
      byAge.sort(Comparator.comparingLong(e -> e.getValue().lastUsed));
      for (Map.Entry<?, Entry> e : byAge) {
        if (bytes.get() <= target) {
          break;
        }
        try {
          if (e.getKey() instanceof Digest d) {
            Files.deleteIfExists(path(d));
            forget(d);
          } else {
            String name = (String) e.getKey();
            Files.deleteIfExists(named.resolve(name));
            forgetNamed(name);
          }
        } catch (IOException ex) {
          throw new UncheckedIOException(ex);
        }
        evictions.increment();
      }
    }
  }

  /**
   * Deletes every entry; returns how many and their bytes. Named files stay: they belong to their owners (a layer's
   * kept index goes with the layer).
   */
  synchronized long[] clear() throws IOException {
    awaitRestored();
    long entries = 0;
    long freed = 0;
    for (Map.Entry<Digest, Entry> e : new ArrayList<>(index.entrySet())) {
      Files.deleteIfExists(path(e.getKey()));
      if (index.remove(e.getKey(), e.getValue())) {
        bytes.addAndGet(-e.getValue().size);
        entries++;
        freed += e.getValue().size;
      }
    }
    return new long[] {entries, freed};
  }

  /** Content entries (named files not counted). */
  long entries() {
    return index.size();
  }

  /** Bytes of content and named files. */
  long bytes() {
    return bytes.get();
  }
}
