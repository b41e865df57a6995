package dev.flatpull.snapshotter.overlay;

import dev.flatpull.snapshotter.store.Kind;
import dev.flatpull.snapshotter.store.MetadataStore;
import dev.flatpull.snapshotter.store.RemoteSource;
import dev.flatpull.snapshotter.store.Snapshot;
import dev.flatpull.snapshotter.store.SnapshotException;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import dev.flatpull.core.OwnerOnly;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongSupplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * containerd's snapshot semantics over overlayfs, as containerd's own overlay snapshotter has them, plus remote
 * snapshots: layers served lazily by FUSE mounts instead of being downloaded.
 *
 * <p>Layout under the root: {@code metadata.db} (the {@link MetadataStore}), {@code snapshots/ID/{fs,work}} for
 * ordinary snapshots, {@code remote/NAME} for the FUSE mount points of remote ones, {@code staging/} for removals in
 * progress, and {@code lock}, held while a daemon serves the root.
 *
 * <p>Crash safety comes from ordering, not from making file effects transactional: a snapshot's directory is created
 * under a temporary name and renamed to its final name before the metadata transaction commits; a removal commits the
 * metadata first and renames the directory away afterwards. A kill at any instruction can therefore leave only
 * directories (or mounts) that no row references, and {@link #open} removes those before serving.
 */
public final class OverlaySnapshotter implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(OverlaySnapshotter.class.getName());
  /** The label containerd's unpacker sets on a layer's Prepare: the name its committed snapshot will have. */
  public static final String TARGET_LABEL = "containerd.io/snapshot.ref";
  /** Marks remote snapshots in Stat and List, as stargz-snapshotter does. */
  public static final String REMOTE_LABEL = "containerd.io/snapshot/remote";
  private static final int MAX_LABEL_BYTES = 4096;

  /**
   * The clocks and the thread a snapshotter runs with, bound by the process's composition root (a test binds its own).
   *
   * @param nanoTime the monotonic clock a remote Prepare's timeline and a deletion's duration are measured with
   * @param clock the wall clock of the snapshots' creation and update times
   * @param deleter where staged removals are deleted: a removal hands its staged directory over under the lock (which
   *     takes microseconds) and the deleter's thread deletes it outside; an executor that runs tasks on the calling
   *     thread deletes under the lock instead, as most snapshotters do (bin/benchmark-removal's baseline). The
   *     snapshotter owns it and shuts it down.
   */
  public record Environment(LongSupplier nanoTime, InstantSource clock, ExecutorService deleter) {
    /** {@code nanoTime} and {@code clock}, and a deletion thread of its own. */
    public static Environment of(LongSupplier nanoTime, InstantSource clock) {
      return new Environment(nanoTime, clock, Executors.newSingleThreadExecutor(
          dev.flatpull.core.DaemonThreads.named("flatpull-delete")));
    }

    /** The system's clocks and a deletion thread of its own. */
    public static Environment system() {
      return of(System::nanoTime, InstantSource.system());
    }
  }

  private final Path root;
  private final Path snapshots;
  private final Path remoteDir;
  private final MetadataStore store;
  private final RemoteLayers remote;
  private final SnapshotterMetrics metrics;
  private final RemovalStaging staging;
  private final FileChannel rootLockChannel;
  private final FileLock rootLock;
  private final ReentrantLock lock = new ReentrantLock(true);
  private final boolean crashPoints;
  // Remote layers mounted but not yet recorded (mounting happens outside the lock): not orphans.
  private final Set<Path> mountingRemote = java.util.concurrent.ConcurrentHashMap.newKeySet();
  private final ExecutorService deleter;
  private final LongSupplier nanoTime;

  private OverlaySnapshotter(Path root, MetadataStore store, RemoteLayers remote, SnapshotterMetrics metrics,
      RemovalStaging staging, FileChannel rootLockChannel, FileLock rootLock,
      boolean crashPoints, Environment env) {
    this.crashPoints = crashPoints;
    this.deleter = env.deleter();
    this.nanoTime = env.nanoTime();
    this.root = root;
    this.snapshots = root.resolve("snapshots");
    this.remoteDir = root.resolve("remote");
    this.store = store;
    this.remote = remote;
    this.metrics = metrics;
    this.staging = staging;
    this.rootLockChannel = rootLockChannel;
    this.rootLock = rootLock;
  }

  /**
   * Opens the snapshotter state in {@code root}: takes the root's lock (one daemon per root), finishes removals that
   * a dead process left, removes directories and mounts that no snapshot references, and mounts again every remote
   * snapshot whose layer is not served.
   */
  public static OverlaySnapshotter open(Path root, RemoteLayers remote, SnapshotterMetrics metrics, Environment env)
      throws IOException {
    return open(root, remote, metrics, true, env);
  }

  /**
   * Like {@link #open}, for a throwaway snapshotter that runs the code before the real one serves (a warm-up): no
   * crash point halts it, so a crash test's armed point is reached by the snapshotter it tests.
   */
  public static OverlaySnapshotter openThrowaway(Path root, RemoteLayers remote, SnapshotterMetrics metrics,
      Environment env) throws IOException {
    return open(root, remote, metrics, false, env);
  }

  private static OverlaySnapshotter open(Path root, RemoteLayers remote, SnapshotterMetrics metrics,
      boolean crashPoints, Environment env) throws IOException {
    // 0700: nothing under the root (container upper directories, layer trees, the page cache) is any other user's.
    OwnerOnly.directory(root);
    FileChannel ch = FileChannel.open(root.resolve("lock"), StandardOpenOption.CREATE, StandardOpenOption.WRITE);
    FileLock rootLock;
    try {
      rootLock = ch.tryLock();
    } catch (java.nio.channels.OverlappingFileLockException sameProcess) {
      rootLock = null;
    }
    if (rootLock == null) {
      ch.close();
      env.deleter().shutdown();
      throw new IOException("another flatpull daemon is serving " + root);
    }
    try {
      OwnerOnly.fileMode(root.resolve("lock"));
      OwnerOnly.directory(root.resolve("snapshots"));
      OwnerOnly.directory(root.resolve("remote"));
      RemovalStaging.sweepAbandoned(root.resolve("staging"));
      MetadataStore store = MetadataStore.open(root.resolve("metadata.db"), env.clock());
      RemovalStaging staging = RemovalStaging.open(root.resolve("staging"));
      OverlaySnapshotter s = new OverlaySnapshotter(root, store, remote, metrics, staging, ch, rootLock,
          crashPoints, env);
      s.removeOrphans();
      s.remountRemote();
      return s;
    } catch (IOException | RuntimeException e) {
      rootLock.release();
      ch.close();
      env.deleter().shutdown();
      throw e;
    }
  }

  /** Prepare: a writable snapshot on {@code parent}, or a remote snapshot when the labels ask for one. */
  public List<SnapshotMount> prepare(String key, String parent, Map<String, String> labels)
      throws SnapshotException, IOException {
    validate(key, labels);
    String target = labels.get(TARGET_LABEL);
    if (target != null && !target.isEmpty()) {
      prepareRemote(key, parent, target, labels);
    }
    return create(key, parent, Kind.ACTIVE, labels);
  }

  /** View: a read-only snapshot of {@code parent}. */
  public List<SnapshotMount> view(String key, String parent, Map<String, String> labels)
      throws SnapshotException, IOException {
    validate(key, labels);
    return create(key, parent, Kind.VIEW, labels);
  }

  /**
   * Serves the layer lazily and commits it as {@code target}, then answers AlreadyExists, which tells containerd's
   * unpacker to skip downloading the layer. Returns normally when the layer must be downloaded after all.
   */
  private void prepareRemote(String key, String parent, String target, Map<String, String> labels)
      throws SnapshotException, IOException {
    boolean targetExists = locked(() -> store.read(tx -> {
      if (tx.find(key).isPresent()) {
        throw SnapshotException.alreadyExists("snapshot " + quote(key) + " already exists");
      }
      return tx.find(target).isPresent();
    }));
    if (targetExists) {
      throw SnapshotException.alreadyExists("target snapshot " + quote(target) + " already exists");
    }
    long received = nanoTime.getAsLong();
    RemoteDecision d = remote.decide(labels);
    long decided = nanoTime.getAsLong();
    if (d.source().isEmpty()) {
      if (d.fallbackReason().isPresent()) {
        metrics.fallback(d.fallbackReason().get());
        LOG.warning("layer for " + quote(target) + " is downloaded, not served lazily: " + d.detail());
      }
      return;
    }
    RemoteSource source = d.source().get();
    Path mountPoint = remoteDir.resolve(UUID.randomUUID().toString());
    mountingRemote.add(mountPoint.toAbsolutePath().normalize());
    try {
      prepareRemoteAt(mountPoint, source, parent, target, labels, received, decided);
    } finally {
      mountingRemote.remove(mountPoint.toAbsolutePath().normalize());
    }
  }

  private void prepareRemoteAt(Path mountPoint, RemoteSource source, String parent, String target,
      Map<String, String> labels, long received, long decided) throws SnapshotException, IOException {
    long mounted;
    try {
      Files.createDirectories(mountPoint);
      remote.mount(source, mountPoint);
      mounted = nanoTime.getAsLong();
    } catch (IOException | RuntimeException e) {
      metrics.fallback("mount_failed");
      LOG.warning("layer for " + quote(target) + " is downloaded, not served lazily: mounting it failed: " + e);
      discardRemote(mountPoint);
      return;
    }
    reach(CrashPoint.REMOTE_MOUNTED);
    Map<String, String> stored = new HashMap<>(labels);
    stored.put(REMOTE_LABEL, "remote snapshot");
    try {
      locked(() -> store.write(tx -> {
        if (tx.find(target).isPresent()) {
          throw SnapshotException.alreadyExists("target snapshot " + quote(target) + " already exists");
        }
        Optional<Snapshot> p = committedParent(tx, parent);
        return tx.insert(target, p, Kind.COMMITTED, stored, Optional.of(mountPoint), Optional.of(source));
      }));
    } catch (SnapshotException | IOException | RuntimeException e) {
      discardRemote(mountPoint);
      throw e;
    }
    metrics.remoteSnapshot();
    metrics.remotePrepared(java.time.Duration.ofNanos(decided - received), java.time.Duration.ofNanos(mounted - decided));
    LOG.info("layer for " + quote(target) + " is served lazily from " + source.imageRef() + ": Prepare received,"
        + " manifest known after " + (decided - received) / 1_000_000 + " ms, mounted after "
        + (mounted - received) / 1_000_000 + " ms");
    throw SnapshotException.alreadyExists("target snapshot " + quote(target) + " already exists");
  }

  private void reach(CrashPoint p) {
    if (crashPoints) {
      p.reach();
    }
  }

  private void discardRemote(Path mountPoint) {
    try {
      if (dev.flatpull.core.MountTable.isMountPoint(mountPoint)) {
        remote.unmount(mountPoint);
      }
      DirectoryTrees.delete(mountPoint);
    } catch (IOException e) {
      LOG.log(Level.WARNING, "cleaning up " + mountPoint + " failed; the next start retries", e);
    }
  }

  private List<SnapshotMount> create(String key, String parent, Kind kind, Map<String, String> labels)
      throws SnapshotException, IOException {
    return locked(() -> {
      Path temp = snapshots.resolve("new-" + UUID.randomUUID());
      Path[] placed = {temp};
      try {
        return store.write(tx -> {
          if (tx.find(key).isPresent()) {
            throw SnapshotException.alreadyExists("snapshot " + quote(key) + " already exists");
          }
          Optional<Snapshot> p = committedParent(tx, parent);
          OwnerOnly.directory(temp);
          Files.createDirectories(temp.resolve("fs"));
          // The container's root directory: 0755 as containerd's overlay snapshotter makes it, whatever the umask,
          // behind its 0700 parent.
          Files.setPosixFilePermissions(temp.resolve("fs"), PosixFilePermissions.fromString("rwxr-xr-x"));
          if (kind == Kind.ACTIVE) {
            OwnerOnly.directory(temp.resolve("work"));
          }
          reach(CrashPoint.PREPARE_DIRECTORY_CREATED);
          Snapshot s = tx.insert(key, p, kind, labels, Optional.empty(), Optional.empty());
          Path dir = snapshots.resolve(Long.toString(s.id()));
          // A directory of that number can only be an orphan of a rolled-back insert: not referenced, safe to drop.
          DirectoryTrees.delete(dir);
          Files.move(temp, dir, StandardCopyOption.ATOMIC_MOVE);
          placed[0] = dir;
          // The row must never outlive a power loss that the rename did not survive.
          DirectoryTrees.sync(snapshots);
          reach(CrashPoint.PREPARE_DIRECTORY_PLACED);
          return mounts(s, tx.ancestors(s));
        });
      } catch (SnapshotException | IOException | RuntimeException e) {
        DirectoryTrees.delete(placed[0]);
        throw e;
      }
    });
  }

  private static Optional<Snapshot> committedParent(MetadataStore.Transaction tx, String parent)
      throws SnapshotException, IOException {
    if (parent == null || parent.isEmpty()) {
      return Optional.empty();
    }
    Snapshot p = tx.find(parent)
        .orElseThrow(() -> SnapshotException.notFound("parent snapshot " + quote(parent) + " does not exist"));
    if (p.kind() != Kind.COMMITTED) {
      throw SnapshotException.invalidArgument("parent " + quote(parent) + " is not a committed snapshot");
    }
    return Optional.of(p);
  }

  public List<SnapshotMount> mounts(String key) throws SnapshotException, IOException {
    return locked(() -> store.read(tx -> {
      Snapshot s = tx.get(key);
      return mounts(s, tx.ancestors(s));
    }));
  }

  /** Commit: the active snapshot {@code key} becomes the committed snapshot {@code name}. */
  public void commit(String name, String key, Map<String, String> labels) throws SnapshotException, IOException {
    validate(name, labels);
    locked(() -> store.write(tx -> {
      Snapshot s = tx.get(key);
      if (s.kind() != Kind.ACTIVE) {
        throw SnapshotException.failedPrecondition("snapshot " + quote(key) + " is not active");
      }
      if (tx.find(name).isPresent()) {
        throw SnapshotException.alreadyExists("snapshot " + quote(name) + " already exists");
      }
      long[] usage = DirectoryTrees.usage(fsOf(s));
      reach(CrashPoint.COMMIT_MEASURED);
      return tx.commit(s, name, labels, usage[0], usage[1]);
    }));
  }

  /**
   * Remove: the metadata goes first, under the lock, then the directory is renamed into the staging directory and handed
   * to the deleter; its contents are deleted on the deleter's thread, after the lock is released, so listing and
   * preparing never wait for a large deletion.
   */
  public void remove(String key) throws SnapshotException, IOException {
    locked(() -> {
      Snapshot s = store.write(tx -> {
        Snapshot found = tx.get(key);
        if (tx.hasChildren(found)) {
          throw SnapshotException.failedPrecondition("cannot remove snapshot " + quote(key) + ": it has children");
        }
        tx.delete(found);
        return found;
      });
      metrics.removal();
      reach(CrashPoint.REMOVE_METADATA_COMMITTED);
      Path dir = s.remoteMount().orElse(snapshots.resolve(Long.toString(s.id())));
      if (s.isRemote() && dev.flatpull.core.MountTable.isMountPoint(dir)) {
        remote.unmount(dir);
      }
      Optional<Path> moved = staging.stage(dir);
      reach(CrashPoint.REMOVE_STAGED);
      moved.ifPresent(p -> {
        metrics.deletionStarted();
        deleter.execute(() -> deleteStaged(p));
      });
      return null;
    });
  }

  private void deleteStaged(Path p) {
    long t0 = nanoTime.getAsLong();
    try {
      DirectoryTrees.delete(p);
    } catch (IOException e) {
      LOG.log(Level.WARNING, "deleting " + p + " failed; the next start retries", e);
    } finally {
      metrics.deletionFinished(nanoTime.getAsLong() - t0);
    }
  }

  public Snapshot stat(String key) throws SnapshotException, IOException {
    return locked(() -> store.read(tx -> tx.get(key)));
  }

  /**
   * Update, as containerd's own storage has it: only labels are mutable, and the field paths are applied in order.
   * {@code labels} replaces them all; {@code labels.KEY} sets one or, when {@code labels} lacks KEY, deletes it; no
   * path at all replaces them all; any other path (the parent, kind, name or times) is an invalid argument and
   * changes nothing. The update is dated; the creation time, parent, kind and name never change. A remote snapshot
   * keeps its {@link #REMOTE_LABEL}, which says how flatpull serves it.
   */
  public Snapshot update(String name, Map<String, String> labels, List<String> paths)
      throws SnapshotException, IOException {
    validate(name, labels);
    for (String path : paths) {
      if (!path.equals("labels") && !(path.startsWith("labels.") && path.length() > "labels.".length())) {
        throw SnapshotException.invalidArgument("cannot update " + quote(path) + " of snapshot " + quote(name)
            + ": only labels are mutable");
      }
    }
    return locked(() -> store.write(tx -> {
      Snapshot s = tx.get(name);
      Map<String, String> next;
      if (paths.isEmpty()) {
        next = new HashMap<>(labels);
      } else {
        next = new HashMap<>(s.labels());
        for (String path : paths) {
          if (path.equals("labels")) {
            next = new HashMap<>(labels);
            continue;
          }
          String k = path.substring("labels.".length());
          if (labels.containsKey(k)) {
            next.put(k, labels.get(k));
          } else {
            next.remove(k);
          }
        }
      }
      if (s.isRemote()) {
        next.putIfAbsent(REMOTE_LABEL, "remote snapshot");
      }
      return tx.setLabels(s, next);
    }));
  }

  public List<Snapshot> list(ListFilter filter) throws IOException {
    try {
      return locked(() -> store.read(tx -> tx.all().stream().filter(filter::matches).toList()));
    } catch (SnapshotException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * Usage: the bytes and inodes a snapshot holds on this node's disk. Measured now for active snapshots (their upper
   * directory), as measured when committing for committed ones. A remote snapshot holds none: its layer is served
   * from the host-wide page cache, shared by every layer and image whose chunks it holds, and bounded and reported as
   * a whole ({@code [cache] disk_size}, the page cache's metrics) rather than counted again in each snapshot, which
   * would make containerd's and kubelet's sums of image usage count shared bytes many times over.
   */
  public long[] usage(String key) throws SnapshotException, IOException {
    Snapshot s = stat(key);
    if (s.isRemote()) {
      return new long[] {0, 0};
    }
    if (s.kind() == Kind.COMMITTED) {
      return new long[] {s.usageBytes(), s.usageInodes()};
    }
    return DirectoryTrees.usage(fsOf(s));
  }

  /** Cleanup: removes directories and mounts no snapshot references, and finishes abandoned removals. */
  public void cleanup() throws IOException {
    RemovalStaging.sweepAbandoned(root.resolve("staging"));
    removeOrphans();
  }

  /** Waits until removed snapshots' files are deleted (for tests and shutdown). */
  public void awaitDeletions() throws InterruptedException {
    java.util.concurrent.Future<?> f = deleter.submit(() -> { });
    try {
      f.get(10, TimeUnit.MINUTES);
    } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
      throw new IllegalStateException(e);
    }
  }

  private List<SnapshotMount> mounts(Snapshot s, List<Snapshot> ancestors) {
    Path fs = fsOf(s);
    if (s.kind() == Kind.COMMITTED || (s.kind() == Kind.VIEW && ancestors.isEmpty())) {
      return List.of(new SnapshotMount("bind", fs.toString(), List.of("ro", "rbind")));
    }
    if (ancestors.isEmpty()) {
      return List.of(new SnapshotMount("bind", fs.toString(), List.of("rw", "rbind")));
    }
    if (s.kind() == Kind.VIEW && ancestors.size() == 1) {
      return List.of(new SnapshotMount("bind", fsOf(ancestors.get(0)).toString(), List.of("ro", "rbind")));
    }
    List<String> lower = new ArrayList<>();
    for (Snapshot a : ancestors) {
      lower.add(fsOf(a).toString());
    }
    List<String> options = new ArrayList<>();
    if (s.kind() == Kind.ACTIVE) {
      Path dir = snapshots.resolve(Long.toString(s.id()));
      options.add("workdir=" + dir.resolve("work"));
      options.add("upperdir=" + dir.resolve("fs"));
    }
    options.addAll(OverlayStack.lowerOptions(lower));
    return List.of(new SnapshotMount("overlay", "overlay", options));
  }

  private Path fsOf(Snapshot s) {
    return s.remoteMount().orElse(snapshots.resolve(Long.toString(s.id())).resolve("fs"));
  }

  private void removeOrphans() throws IOException {
    try {
      locked(() -> {
        List<Snapshot> rows = store.read(tx -> tx.all());
        Set<String> ids = new HashSet<>();
        Set<Path> mounts = new HashSet<>();
        for (Snapshot s : rows) {
          ids.add(Long.toString(s.id()));
          s.remoteMount().ifPresent(m -> mounts.add(m.toAbsolutePath().normalize()));
        }
        try (var entries = Files.list(snapshots)) {
          for (Path p : entries.toList()) {
            if (!ids.contains(p.getFileName().toString())) {
              LOG.info("removing orphaned snapshot directory " + p);
              staging.stage(p).ifPresent(this::deleteStagedQuietly);
            }
          }
        }
        try (var entries = Files.list(remoteDir)) {
          for (Path p : entries.toList()) {
            Path normalized = p.toAbsolutePath().normalize();
            if (!mounts.contains(normalized) && !mountingRemote.contains(normalized)) {
              LOG.info("removing orphaned remote layer mount " + p);
              discardRemote(p);
            }
          }
        }
        return null;
      });
    } catch (SnapshotException e) {
      throw new IllegalStateException(e);
    }
  }

  private void deleteStagedQuietly(Path p) {
    try {
      DirectoryTrees.delete(p);
    } catch (IOException e) {
      LOG.log(Level.WARNING, "deleting " + p + " failed; the next start retries", e);
    }
  }

  // Attempts at taking a held mount over, after which its device is let go and the layer mounted afresh.
  private static final int TAKE_OVER_ATTEMPTS = 3;
  private final Map<Path, Integer> takeOverFailures = new java.util.concurrent.ConcurrentHashMap<>();

  /**
   * Serves every remote snapshot that is not served (after a crash of the process that served it). A mount whose FUSE
   * device the daemon holds is taken over in place: its containers' reads waited and go on. Any other is mounted
   * afresh: its layer is read lazily again, from the source stored with it. A layer that cannot be served now is
   * logged and retried by {@link #remountRemote} on the next call (the daemon calls it periodically); a held mount
   * that cannot be taken over {@value #TAKE_OVER_ATTEMPTS} times is let go and mounted afresh.
   */
  public int remountRemote() throws IOException {
    List<Snapshot> rows;
    try {
      rows = locked(() -> store.read(tx -> tx.all()));
    } catch (SnapshotException e) {
      throw new IllegalStateException(e);
    }
    if (rows.stream().noneMatch(Snapshot::isRemote)) {
      // Nothing to serve: asking would start a FUSE manager and wait for it before the daemon could answer.
      return 0;
    }
    Set<Path> served = remote.served();
    int failed = 0;
    for (Snapshot s : rows) {
      if (s.remoteMount().isEmpty() || served.contains(s.remoteMount().get().toAbsolutePath().normalize())) {
        continue;
      }
      try {
        // Under the lock, so that a Remove cannot slip in between and leave a mount for a deleted snapshot.
        locked(() -> {
          Optional<Snapshot> still = store.read(tx -> tx.find(s.name()));
          if (still.isEmpty() || !still.get().remoteMount().equals(s.remoteMount())) {
            return null;
          }
          Path m = s.remoteMount().get();
          if (remote.held(m)) {
            // Its device held, the mount is alive and its containers' reads wait: served in place, untouched till then.
            try {
              remote.takeOver(s.remote().orElseThrow(), m);
              takeOverFailures.remove(m);
              LOG.info("took over remote snapshot " + quote(s.name()) + " at " + m);
              return null;
            } catch (IOException e) {
              if (takeOverFailures.merge(m, 1, Integer::sum) < TAKE_OVER_ATTEMPTS) {
                throw e;
              }
              takeOverFailures.remove(m);
              LOG.warning("taking over remote snapshot " + quote(s.name()) + " at " + m + " failed "
                  + TAKE_OVER_ATTEMPTS + " times (" + e.getMessage() + "): its containers' reads of it now fail,"
                  + " and it is mounted afresh");
              remote.release(m);
            }
          }
          if (dev.flatpull.core.MountTable.isMountPoint(m)) {
            HostMounts.detach(m); // the mount of a dead server: every access fails with ENOTCONN
          }
          Files.createDirectories(m);
          remote.mount(s.remote().orElseThrow(), m);
          LOG.info("remounted remote snapshot " + quote(s.name()) + " at " + m);
          return null;
        });
      } catch (SnapshotException | IOException | RuntimeException e) {
        failed++;
        LOG.warning("cannot remount remote snapshot " + quote(s.name()) + " yet: " + e.getMessage());
      }
    }
    return failed;
  }

  public Path root() {
    return root;
  }

  @Override
  public void close() throws IOException {
    deleter.shutdown();
    try {
      deleter.awaitTermination(10, TimeUnit.MINUTES);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    try {
      store.close();
      staging.close();
    } finally {
      rootLock.release();
      rootLockChannel.close();
    }
  }

  @FunctionalInterface
  private interface Locked<T> {
    T run() throws SnapshotException, IOException;
  }

  private <T> T locked(Locked<T> work) throws SnapshotException, IOException {
    lock.lock();
    try {
      return work.run();
    } finally {
      lock.unlock();
    }
  }

  private static void validate(String key, Map<String, String> labels) throws SnapshotException {
    if (key == null || key.isEmpty()) {
      throw SnapshotException.invalidArgument("snapshot key must not be empty");
    }
    if (key.indexOf('\0') >= 0) {
      throw SnapshotException.invalidArgument("snapshot key must not contain NUL");
    }
    for (Map.Entry<String, String> e : labels.entrySet()) {
      if (e.getKey().isEmpty()) {
        throw SnapshotException.invalidArgument("label key must not be empty");
      }
      int size = e.getKey().getBytes(StandardCharsets.UTF_8).length + e.getValue().getBytes(StandardCharsets.UTF_8).length;
      if (size > MAX_LABEL_BYTES) {
        throw SnapshotException.invalidArgument("label " + quote(e.getKey()) + ": key and value exceed "
            + MAX_LABEL_BYTES + " bytes");
      }
    }
  }

  private static String quote(String s) {
    return "\"" + s + "\"";
  }
}
