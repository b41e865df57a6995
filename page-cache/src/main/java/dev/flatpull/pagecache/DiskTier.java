package dev.flatpull.pagecache;

import dev.flatpull.core.Digest;
import dev.flatpull.core.NamedFiles;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
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
 * Content keyed by its SHA-256, appended to pack files under {@code DIR/packs} ({@link PackFile}): one file holds many
 * entries, so that a fresh node's cold start does not create a file per chunk. A process appends to a pack of its own,
 * writes its index when it is full (16 MiB, less for a small budget) or the tier closes, and starts the next; it never
 * appends to a pack an earlier process wrote. A killed process leaves its last pack without an index; the next one
 * reads it record by record up to the first that is not whole. Writes are not fsynced: every read re-verifies the
 * content and forgets an entry that does not match (disk corruption, a foreign write, or what a power loss left of
 * an entry), so an entry the disk lost costs a fetch, never a wrong byte, and an fsync per chunk would buy nothing.
 * The budget counts the packs' bytes on disk; beyond it, whole packs are evicted, least recently used first (a pack is
 * as recent as its most recently written or read entry). Thread-safe.
 *
 * <p>Files kept under names of their own ({@link NamedFiles}: derived data such as a layer's parsed index) live under
 * {@code DIR/named/NAME}, written to {@code DIR/tmp} and renamed, and count in the same budget and recency order.
 *
 * <p>A cache of the earlier layout (a file per entry under {@code DIR/sha256}) is removed by the restore: its content
 * is fetched again when read.
 */
final class DiskTier implements NamedFiles {
  private static final java.util.logging.Logger LOG = java.util.logging.Logger.getLogger(DiskTier.class.getName());

  /** A named file's size and recency. */
  private record Entry(long size, long lastUsed) {}

  /** Where an entry's content is. */
  private record Location(PackFile pack, long offset, int length) {}

  // A named file's name: one path component, nothing the directory could be escaped or hidden with.
  private static final java.util.regex.Pattern NAME = java.util.regex.Pattern.compile("[a-z0-9][a-z0-9._-]{0,199}");

  /** The largest pack: evicted whole, so a budget holds at least 64 of them ({@link #packBytes}). */
  static final long MAX_PACK_BYTES = 16L << 20;
  private static final long MIN_PACK_BYTES = 64L << 10;

  private final Path packDir;
  private final Path named;
  private final Path tmp;
  private final Path oldLayout;
  private final long budget;
  private final long packBytes;
  private final Map<Digest, Location> index = new ConcurrentHashMap<>();
  private final Map<Long, PackFile> packs = new ConcurrentHashMap<>();
  private final Map<String, Entry> namedIndex = new ConcurrentHashMap<>();
  private final AtomicLong bytes = new AtomicLong();
  private final java.util.concurrent.CountDownLatch restored = new java.util.concurrent.CountDownLatch(1);
  private volatile boolean closed;
  private volatile boolean restoreStarted;
  private final AtomicLong clock = new AtomicLong();
  // Packs with ids below this were there at the open (the restore's); this process's own start here.
  private final long firstOwnId;
  // Guarded by this: the pack appended to, and the next id to try.
  private PackFile appending;
  private long nextId;
  final LongAdder corrupt = new LongAdder();
  final LongAdder evictions = new LongAdder();

  /**
   * Opens the tier in {@code dir}: named files are known when this returns, stored content is found in the background
   * ({@link #restore}).
   */
  static DiskTier open(Path dir, long budget) throws IOException {
    return open(dir, budget, java.util.concurrent.CompletableFuture.completedFuture(null),
        dev.flatpull.core.DaemonThreads.named(RESTORE_THREAD));
  }

  /** The name of the restore's thread. */
  static final String RESTORE_THREAD = "flatpull-page-cache-restore";

  /** Opens the tier, its restore begun on a thread of {@code threads} once {@code mayStart} completes. */
  static DiskTier open(Path dir, long budget, java.util.concurrent.CompletionStage<?> mayStart,
      java.util.concurrent.ThreadFactory threads) throws IOException {
    DiskTier tier = new DiskTier(dir, budget, packBytes(budget));
    mayStart.thenRun(() -> {
      // From here a lookup waits for the restore rather than miss: set before its thread runs.
      tier.restoreStarted = true;
      threads.newThread(tier::restore).start();
    });
    return tier;
  }

  /**
   * @param packBytes the size at which a pack is sealed (tests: a pack per entry under any budget)
   * @param restorer runs the restore (tests pass one that holds it: a disk slower than anything)
   */
  static DiskTier open(Path dir, long budget, long packBytes, java.util.concurrent.Executor restorer)
      throws IOException {
    DiskTier tier = new DiskTier(dir, budget, packBytes);
    restorer.execute(tier::restore);
    return tier;
  }

  /** Like {@link #open(Path, long, long, java.util.concurrent.Executor)}, packs sized for the budget. */
  static DiskTier open(Path dir, long budget, java.util.concurrent.Executor restorer) throws IOException {
    return open(dir, budget, packBytes(budget), restorer);
  }

  /** The size at which a pack is sealed: small enough that eviction, which takes whole packs, keeps to the budget. */
  static long packBytes(long budget) {
    return Math.max(MIN_PACK_BYTES, Math.min(MAX_PACK_BYTES, budget / 64));
  }

  private DiskTier(Path dir, long budget, long packBytes) throws IOException {
    this.packDir = dir.resolve("packs");
    this.named = dir.resolve("named");
    this.tmp = dir.resolve("tmp");
    this.oldLayout = dir.resolve("sha256");
    this.budget = budget;
    this.packBytes = packBytes;
    // 0700 and entries 0600: a file the image makes 0600 must not be readable from the cache by another user.
    dev.flatpull.core.OwnerOnly.directory(dir);
    dev.flatpull.core.OwnerOnly.directory(packDir);
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
    // The packs' names only (a budget holds a few hundred): this process's own packs come after them.
    long highest = -1;
    try (DirectoryStream<Path> found = Files.newDirectoryStream(packDir)) {
      for (Path p : found) {
        highest = Math.max(highest, PackFile.idOf(p.getFileName().toString()));
      }
    }
    this.firstOwnId = highest + 1;
    this.nextId = firstOwnId;
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
   * Finds the content an earlier process stored, on a thread of its own: each of its packs' index (a few hundred
   * small reads for a full cache; a pack left without one is read record by record), oldest pack first. Once it has
   * begun, a lookup the index cannot answer waits for it (up to {@link #RESTORE_WAIT}); before (a FUSE manager taking
   * mounts over holds it until it serves), such a lookup is a miss, fetched again, never wrong. The budget counts only
   * what is known, and the packs found are older in the recency order than anything used since the open (negative clock
   * values, in the order found). It also removes a cache of the earlier layout, a file per entry.
   */
  private void restore() {
    restoreStarted = true;
    long started = System.nanoTime();
    try {
      removeOldLayout();
      List<Found> found = listOldestFirst(packDir);
      long age = -found.size();
      long entries = 0;
      long size = 0;
      for (Found f : found) {
        age++;
        if (closed) {
          return;
        }
        long id = PackFile.idOf(f.path().getFileName().toString());
        if (id >= firstOwnId) {
          continue; // this process's own
        }
        if (id < 0 || !f.regular()) {
          removeStranger(f.path());
          continue;
        }
        PackFile pack = PackFile.found(f.path(), id, f.size());
        List<PackFile.Record> records;
        try {
          records = pack.records();
        } catch (IOException e) {
          LOG.warning("page cache: " + f.path() + " could not be read (its content is fetched again): " + e);
          records = List.of();
        }
        pack.lastUsed = age;
        synchronized (this) {
          packs.put(id, pack);
          bytes.addAndGet(f.size());
          // An entry stored since the open is known better than an old pack knows it.
          for (PackFile.Record r : records) {
            if (index.putIfAbsent(r.digest(), new Location(pack, r.offset(), r.length())) == null) {
              entries++;
              size += r.length();
            }
          }
        }
      }
      long ms = (System.nanoTime() - started) / 1_000_000;
      // A new cache (every throwaway one of a warm-up) has nothing to say.
      LOG.log(entries > 0 ? java.util.logging.Level.INFO : java.util.logging.Level.FINE, String.format(
          "page cache: found %,d entries (%,d MiB) stored before, in %d ms", entries, size >> 20, ms));
    } catch (IOException | RuntimeException e) {
      LOG.warning("page cache: finding the content stored in " + packDir + " failed (it is fetched again when read): "
          + e);
    } finally {
      restored.countDown();
    }
    evictBeyondBudget();
  }

  private static void removeStranger(Path p) {
    try {
      Files.deleteIfExists(p);
    } catch (IOException e) {
      // A stranger the cache cannot remove (a directory with content, say) is left; the rest is still found.
      LOG.warning("page cache: " + p + " is not a pack and could not be removed: " + e);
    }
  }

  /** Removes the earlier layout's files (one per entry), whose content is fetched again when read. */
  private void removeOldLayout() throws IOException {
    if (!Files.isDirectory(oldLayout, LinkOption.NOFOLLOW_LINKS)) {
      return;
    }
    long removed = 0;
    try (DirectoryStream<Path> files = Files.newDirectoryStream(oldLayout)) {
      for (Path p : files) {
        if (closed) {
          return;
        }
        if (Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)) {
          Files.deleteIfExists(p);
          removed++;
        }
      }
    }
    try {
      Files.deleteIfExists(oldLayout);
    } catch (java.nio.file.DirectoryNotEmptyException e) {
      LOG.warning("page cache: " + oldLayout + " holds what is not the cache's, and is left");
    }
    LOG.info(String.format("page cache: removed %,d entries of the earlier layout (a file per entry)", removed));
  }

  /** Stops a restore still under way and seals the pack being appended to (the cache is closed). */
  void close() {
    closed = true;
    synchronized (this) {
      sealAppending();
    }
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

  /** How long a lookup waits for a restore under way: longer than reading a full cache's indexes takes. */
  static final Duration RESTORE_WAIT = Duration.ofSeconds(5);

  /** Where {@code d} is, waiting for a restore under way when the index does not know it yet. */
  private Location locate(Digest d) {
    Location at = index.get(d);
    if (at == null && restoreStarted && restored.getCount() > 0) {
      try {
        restored.await(RESTORE_WAIT.toNanos(), java.util.concurrent.TimeUnit.NANOSECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      at = index.get(d);
    }
    return at;
  }

  boolean contains(Digest d) {
    return locate(d) != null;
  }

  /** The verified content of {@code d}, or empty when absent or corrupt (a corrupt entry is forgotten). */
  Optional<byte[]> get(Digest d) throws IOException {
    Location at = locate(d);
    if (at == null) {
      return Optional.empty();
    }
    byte[] content = new byte[at.length()];
    if (!at.pack().read(content, at.offset())) {
      index.remove(d, at);
      return Optional.empty();
    }
    if (!d.recompute(content, 0, content.length).equals(d)) {
      corrupt.increment();
      // Its bytes stay in the pack until the pack goes: a pack is written once.
      index.remove(d, at);
      return Optional.empty();
    }
    at.pack().lastUsed = clock.incrementAndGet();
    return Optional.of(content);
  }

  /** Stores verified content (in the kernel's hands when this returns; see the class comment); a no-op when the entry exists. */
  void put(Digest d, byte[] content) throws IOException {
    if (!"sha256".equals(d.algorithm()) || index.containsKey(d)) {
      return;
    }
    synchronized (this) {
      if (closed || index.containsKey(d)) {
        return;
      }
      PackFile pack = packFor(PackFile.HEADER + content.length);
      long before = pack.size;
      PackFile.Record r = pack.append(d, content);
      bytes.addAndGet(pack.size - before);
      pack.lastUsed = clock.incrementAndGet();
      index.put(d, new Location(pack, r.offset(), r.length()));
      if (pack.size >= packBytes) {
        sealAppending();
      }
    }
    evictBeyondBudget();
  }

  /** The pack to append {@code recordBytes} to: the current one, or a new one when it has no room (guarded). */
  private PackFile packFor(long recordBytes) throws IOException {
    if (appending != null && appending.size > 0 && appending.size + recordBytes > packBytes) {
      sealAppending();
    }
    while (appending == null) {
      long id = nextId++;
      try {
        appending = PackFile.create(packDir, id);
        packs.put(id, appending);
      } catch (FileAlreadyExistsException taken) {
        // another process opened the same directory: take the next name
      }
    }
    return appending;
  }

  /** Seals the pack being appended to, if any (guarded). */
  private void sealAppending() {
    PackFile pack = appending;
    if (pack == null) {
      return;
    }
    appending = null;
    long before = pack.size;
    try {
      pack.seal();
    } catch (IOException e) {
      LOG.fine("page cache: sealing " + pack.path + " failed (the next process reads it record by record): " + e);
    }
    bytes.addAndGet(pack.size - before);
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
      // Packs and named files in one recency order: the budget is the node's disk, whatever fills it.
      record Candidate(long lastUsed, Object what, long size) {}
      List<Candidate> byAge = new ArrayList<>();
      for (PackFile p : packs.values()) {
        byAge.add(new Candidate(p.lastUsed, p, p.size));
      }
      namedIndex.forEach((name, e) -> byAge.add(new Candidate(e.lastUsed, name, e.size)));
      byAge.sort(Comparator.comparingLong(Candidate::lastUsed));
      java.util.Set<PackFile> victims = new java.util.HashSet<>();
      long left = bytes.get();
      for (Candidate c : byAge) {
        if (left <= target) {
          break;
        }
        left -= c.size();
        if (c.what() instanceof PackFile p) {
          victims.add(p);
        } else {
          String name = (String) c.what();
          try {
            Files.deleteIfExists(named.resolve(name));
          } catch (IOException ex) {
            throw new UncheckedIOException(ex);
          }
          forgetNamed(name);
          evictions.increment();
        }
      }
      if (!victims.isEmpty()) {
        // One pass over the index for all the packs that go.
        index.values().removeIf(l -> {
          boolean gone = victims.contains(l.pack());
          if (gone) {
            evictions.increment();
          }
          return gone;
        });
        for (PackFile p : victims) {
          removePack(p);
        }
      }
    }
  }

  /** Deletes a pack whose entries are no longer indexed (guarded). */
  private void removePack(PackFile p) {
    if (p == appending) {
      appending = null;
    }
    packs.remove(p.id, p);
    bytes.addAndGet(-p.size);
    try {
      p.delete();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /**
   * Deletes every entry; returns how many and the bytes their packs held. Named files stay: they belong to their owners
   * (a layer's kept index goes with the layer).
   */
  long[] clear() throws IOException {
    // Outside the lock: the restore takes it for each pack it found.
    awaitRestored();
    synchronized (this) {
      long entries = index.size();
      long freed = 0;
      index.clear();
      for (PackFile p : new ArrayList<>(packs.values())) {
        freed += p.size;
        removePack(p);
      }
      return new long[] {entries, freed};
    }
  }

  /**
   * Reads every entry of the packs in {@code dir} and checks it against its digest, changing nothing: for a cache a
   * running process owns (a test of what crashes leave). A pack deleted meanwhile is skipped.
   */
  static PageCache.Checked check(Path dir) throws IOException {
    long entries = 0;
    long corrupt = 0;
    Path packDir = dir.resolve("packs");
    if (!Files.isDirectory(packDir)) {
      return new PageCache.Checked(0, 0);
    }
    for (Found f : listOldestFirst(packDir)) {
      long id = PackFile.idOf(f.path().getFileName().toString());
      if (id < 0 || !f.regular()) {
        continue;
      }
      PackFile pack = PackFile.found(f.path(), id, f.size());
      try {
        for (PackFile.Record r : pack.records()) {
          byte[] content = new byte[r.length()];
          if (!pack.read(content, r.offset())) {
            break;
          }
          if (r.digest().recompute(content, 0, content.length).equals(r.digest())) {
            entries++;
          } else {
            corrupt++;
          }
        }
      } finally {
        pack.close();
      }
    }
    return new PageCache.Checked(entries, corrupt);
  }

  /** Content entries (named files not counted). */
  long entries() {
    return index.size();
  }

  /** Bytes of the packs and named files on disk. */
  long bytes() {
    return bytes.get();
  }
}
