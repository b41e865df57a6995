package dev.flatpull.fuse;

import dev.flatpull.core.MountTable;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One layer mounted read-only with FUSE. The options make an immutable tree fast: {@code kernel_cache} keeps file pages
 * across opens, long entry/attribute timeouts spare repeated lookups, {@code use_ino} shows the tree's inode numbers (so
 * hard links share one), and {@code allow_other} lets containerd and overlayfs read it. {@code nosuid,nodev} are
 * explicit, not left to libfuse's defaults: a layer's setuid binaries and device nodes act only through the container's
 * overlay mount, never through the layer's own mount point. Closing unmounts.
 */
public final class LayerMount implements AutoCloseable {
  private static final List<String> OPTIONS = List.of(
      "-o", "ro,nosuid,nodev,use_ino,kernel_cache,allow_other,default_permissions,entry_timeout=3600,attr_timeout=3600,"
          + "negative_timeout=3600,fsname=flatpull,subtype=flatpull");

  private final LayerFileSystem fs;
  private final Path mountPoint;

  private LayerMount(LayerFileSystem fs, Path mountPoint) {
    this.fs = fs;
    this.mountPoint = mountPoint;
  }

  /**
   * Mounts {@code fs} at {@code mountPoint} (created if needed) and returns once the kernel serves it. A stale mount
   * left by a killed process (ENOTCONN) is lazily unmounted first.
   */
  public static LayerMount mount(LayerFileSystem fs, Path mountPoint) throws IOException {
    return mount(fs, mountPoint, false);
  }

  /**
   * Like {@link #mount(LayerFileSystem, Path)}; {@code singleThreaded} runs libfuse's single-threaded loop ({@code -s})
   * instead of the multi-threaded one, which only the benchmark that compares the two should want: with one thread,
   * a read waiting for the registry stalls every other read of the layer.
   */
  public static LayerMount mount(LayerFileSystem fs, Path mountPoint, boolean singleThreaded) throws IOException {
    return mount(fs, mountPoint, singleThreaded, LOOP_THREADS);
  }

  /** A thread of its own for each of a mount's FUSE workers (see {@link FuseSession}), each as long as it serves. */
  public static final Executor LOOP_THREADS = worker -> {
    Thread t = new Thread(worker, "flatpull-fuse");
    t.setDaemon(true);
    t.start();
  };

  /**
   * Mounts with the FUSE workers on {@code loopThreads} (each task occupies its thread until the worker ends) and
   * returns as soon as the kernel has initialised the mount. The workers are Java threads (see {@link FuseSession}):
   * libfuse's own are attached to the JVM and detached again around every callback. Readiness comes from libfuse's
   * {@code init} callback: jnr-fuse's own non-blocking mount waited a fixed two seconds for it.
   */
  public static LayerMount mount(LayerFileSystem fs, Path mountPoint, boolean singleThreaded, Executor loopThreads)
      throws IOException {
    if (!fs.bound()) {
      throw new IllegalStateException("a file system with no layer cannot be mounted");
    }
    clearStale(mountPoint);
    Files.createDirectories(mountPoint);
    java.util.List<String> options = new java.util.ArrayList<>(OPTIONS);
    if (singleThreaded) {
      options.add("-s");
    }
    Path at = mountPoint.toAbsolutePath();
    CompletableFuture<Void> loopEnded = FuseSession.start(fs.operations(), "flatpull", at, options, loopThreads);
    fs.mountedAt(at);
    try {
      CompletableFuture.anyOf(fs.initialized(), loopEnded).get(MOUNT_TIMEOUT_SECONDS, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      fs.umount();
      throw new java.io.InterruptedIOException("interrupted mounting " + mountPoint);
    } catch (ExecutionException | TimeoutException e) {
      fs.umount();
      Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
      throw new IOException("mounting a FUSE file system at " + mountPoint + " failed: " + cause, cause);
    }
    if (!fs.initialized().isDone()) {
      fs.umount();
      throw new IOException("mounting a FUSE file system at " + mountPoint + " failed: libfuse ended before the"
          + " kernel initialised the mount (is /dev/fuse usable and fusermount installed?)");
    }
    return new LayerMount(fs, mountPoint);
  }

  private static final long MOUNT_TIMEOUT_SECONDS = 30;

  /**
   * Unmounts a mount point whose FUSE server died ("Transport endpoint is not connected"). A dead server's mount root
   * may still answer stat, so the check lists the directory.
   */
  public static void clearStale(Path mountPoint) throws IOException {
    if (!isMounted(mountPoint)) {
      return;
    }
    try (var entries = Files.newDirectoryStream(mountPoint)) {
      entries.iterator().hasNext();
    } catch (IOException e) {
      unmountLazily(mountPoint);
    }
  }

  /** Whether something is mounted at {@code mountPoint}. */
  public static boolean isMounted(Path mountPoint) throws IOException {
    return MountTable.isMountPoint(mountPoint);
  }

  /** {@code fusermount -u -z}: detaches the mount now, even with files open in it. */
  public static void unmountLazily(Path mountPoint) throws IOException {
    try {
      Process p = new ProcessBuilder("fusermount", "-u", "-z", mountPoint.toString()).redirectErrorStream(true).start();
      if (!p.waitFor(30, TimeUnit.SECONDS) || p.exitValue() != 0) {
        throw new IOException("fusermount -u -z " + mountPoint + " failed: " + new String(p.getInputStream().readAllBytes()));
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("interrupted unmounting " + mountPoint);
    }
  }

  public Path mountPoint() {
    return mountPoint;
  }

  /** Unmounts, and returns once the kernel no longer lists the mount (at most about ten seconds). */
  @Override
  public void close() {
    fs.umount();
    try {
      for (int i = 0; i < 200 && isMounted(mountPoint); i++) {
        Thread.sleep(50);
      }
    } catch (IOException e) {
      // /proc unreadable: nothing to wait on.
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
