package dev.flatpull.snapshotter.overlay;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.UUID;

/**
 * Removal outside the storage lock, after containers/storage: under the lock a removed snapshot's directory is only
 * renamed into this process's staging directory; its contents are deleted after the lock is released. The staging
 * directory {@code staging/NAME} comes with a lock file {@code staging/NAME.lock} that this process holds while it
 * lives, so a later start can tell abandoned staging directories (lock free: their process died mid-deletion) from
 * live ones, and finish them.
 */
public final class RemovalStaging implements AutoCloseable {
  private final Path dir;
  private final Path lockFile;
  private final FileChannel channel;
  private final FileLock lock;

  private RemovalStaging(Path dir, Path lockFile, FileChannel channel, FileLock lock) {
    this.dir = dir;
    this.lockFile = lockFile;
    this.channel = channel;
    this.lock = lock;
  }

  /** Creates this process's staging directory under {@code stagingRoot} and takes its lock. */
  public static RemovalStaging open(Path stagingRoot) throws IOException {
    Files.createDirectories(stagingRoot);
    String name = ProcessHandle.current().pid() + "-" + UUID.randomUUID().toString().substring(0, 8);
    Path lockFile = stagingRoot.resolve(name + ".lock");
    FileChannel ch = FileChannel.open(lockFile, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
    FileLock lock = ch.lock();
    Path dir = Files.createDirectory(stagingRoot.resolve(name));
    return new RemovalStaging(dir, lockFile, ch, lock);
  }

  /**
   * Renames {@code victim} into the staging directory (an atomic rename on one file system) and returns its new path.
   * A missing victim returns empty.
   */
  public java.util.Optional<Path> stage(Path victim) throws IOException {
    if (!Files.exists(victim, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
      return java.util.Optional.empty();
    }
    Path target = dir.resolve(victim.getFileName() + "-" + UUID.randomUUID().toString().substring(0, 8));
    Files.move(victim, target, StandardCopyOption.ATOMIC_MOVE);
    return java.util.Optional.of(target);
  }

  /**
   * Deletes staging directories under {@code stagingRoot} whose lock no process holds, and stray lock files.
   *
   * @return how many abandoned staging directories were deleted
   */
  public static int sweepAbandoned(Path stagingRoot) throws IOException {
    if (!Files.isDirectory(stagingRoot)) {
      return 0;
    }
    int swept = 0;
    try (var entries = Files.list(stagingRoot)) {
      for (Path p : entries.toList()) {
        String n = p.getFileName().toString();
        if (n.endsWith(".lock")) {
          continue;
        }
        Path lockFile = stagingRoot.resolve(n + ".lock");
        if (isHeld(lockFile)) {
          continue;
        }
        DirectoryTrees.delete(p);
        Files.deleteIfExists(lockFile);
        swept++;
      }
    }
    try (var entries = Files.list(stagingRoot)) {
      for (Path p : entries.toList()) {
        String n = p.getFileName().toString();
        if (n.endsWith(".lock") && !Files.exists(stagingRoot.resolve(n.substring(0, n.length() - 5))) && !isHeld(p)) {
          Files.deleteIfExists(p);
        }
      }
    }
    return swept;
  }

  private static boolean isHeld(Path lockFile) throws IOException {
    if (!Files.exists(lockFile)) {
      return false;
    }
    try (FileChannel ch = FileChannel.open(lockFile, StandardOpenOption.WRITE)) {
      FileLock l = ch.tryLock();
      if (l == null) {
        return true;
      }
      l.release();
      return false;
    } catch (OverlappingFileLockException e) {
      return true; // held by this very process
    }
  }

  public Path directory() {
    return dir;
  }

  /** Deletes whatever is still staged, then the staging directory and its lock. */
  @Override
  public void close() throws IOException {
    try {
      DirectoryTrees.delete(dir);
      Files.deleteIfExists(lockFile);
    } finally {
      lock.release();
      channel.close();
    }
  }
}
