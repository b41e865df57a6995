package dev.flatpull.snapshotter.overlay;

import java.io.IOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;

/** Measuring and deleting snapshot directories, never crossing into another file system. */
public final class DirectoryTrees {
  private DirectoryTrees() {}

  /**
   * Disk usage as containerd reports it: bytes and inodes, hard links counted once. Java does not expose st_blocks, so
   * bytes are each file's size rounded up to whole 4 KiB blocks (sparse files count as if allocated).
   */
  public static long[] usage(Path dir) throws IOException {
    if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) {
      return new long[] {0, 0};
    }
    Object rootDevice = Files.getAttribute(dir, "unix:dev", LinkOption.NOFOLLOW_LINKS);
    long[] total = {0, 0};
    java.util.Set<Object> seen = new java.util.HashSet<>();
    Files.walkFileTree(dir, new SimpleFileVisitor<>() {
      @Override
      public FileVisitResult preVisitDirectory(Path d, BasicFileAttributes a) throws IOException {
        if (!rootDevice.equals(Files.getAttribute(d, "unix:dev", LinkOption.NOFOLLOW_LINKS))) {
          return FileVisitResult.SKIP_SUBTREE;
        }
        count(d, a);
        return FileVisitResult.CONTINUE;
      }

      @Override
      public FileVisitResult visitFile(Path f, BasicFileAttributes a) throws IOException {
        count(f, a);
        return FileVisitResult.CONTINUE;
      }

      @Override
      public FileVisitResult visitFileFailed(Path f, IOException e) {
        return FileVisitResult.CONTINUE;
      }

      private void count(Path p, BasicFileAttributes a) throws IOException {
        if (seen.add(a.fileKey())) {
          total[0] += (a.size() + 4095) / 4096 * 4096;
          total[1]++;
        }
      }
    });
    return total;
  }

  /**
   * Deletes {@code dir} and everything in it. Mounts inside it are detached first, so deletion never reaches into a
   * FUSE layer or anything else mounted there. A missing tree is not an error.
   */
  public static void delete(Path dir) throws IOException {
    if (!Files.exists(dir, LinkOption.NOFOLLOW_LINKS)) {
      return;
    }
    HostMounts.detachAllUnder(dir);
    Files.walkFileTree(dir, new SimpleFileVisitor<>() {
      @Override
      public FileVisitResult visitFile(Path f, BasicFileAttributes a) throws IOException {
        deleteOne(f);
        return FileVisitResult.CONTINUE;
      }

      @Override
      public FileVisitResult visitFileFailed(Path f, IOException e) throws IOException {
        if (e instanceof NoSuchFileException) {
          return FileVisitResult.CONTINUE;
        }
        throw e;
      }

      @Override
      public FileVisitResult postVisitDirectory(Path d, IOException e) throws IOException {
        if (e != null && !(e instanceof NoSuchFileException)) {
          throw e;
        }
        deleteOne(d);
        return FileVisitResult.CONTINUE;
      }
    });
  }

  /** Makes the entries of {@code dir} (a rename into it) durable, as fsync(2) of the directory does. */
  public static void sync(Path dir) throws IOException {
    try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(dir, java.nio.file.StandardOpenOption.READ)) {
      ch.force(true);
    }
  }

  private static void deleteOne(Path p) throws IOException {
    try {
      Files.deleteIfExists(p);
    } catch (AccessDeniedException e) {
      // A directory without write permission (a container may chmod its upper dir): open it up and retry.
      Path parent = p.getParent();
      if (parent != null) {
        parent.toFile().setWritable(true, true);
      }
      Files.deleteIfExists(p);
    }
  }
}
