package dev.flatpull.fuse;

import dev.flatpull.config.FuseSettings.Engine;
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
 * One layer mounted read-only with FUSE, served by one of two engines ({@link Engine}): the kernel engine
 * ({@link KernelSession}, flatpull speaking the kernel's protocol) or libfuse 2 through jnr-fuse, whose options are
 * below. A mount the kernel engine cannot make (no CAP_SYS_ADMIN) is made with libfuse, said once in the log. For
 * libfuse, the options make an immutable tree fast: {@code kernel_cache} keeps file pages
 * across opens, long entry/attribute timeouts spare repeated lookups, {@code use_ino} shows the tree's inode numbers (so
 * hard links share one), and {@code allow_other} lets containerd and overlayfs read it. {@code nosuid,nodev} are
 * explicit, not left to libfuse's defaults: a layer's setuid binaries and device nodes act only through the container's
 * overlay mount, never through the layer's own mount point. Closing unmounts.
 */
public final class LayerMount implements AutoCloseable {
  private static final List<String> OPTIONS = List.of(
      "-o", "ro,nosuid,nodev,use_ino,kernel_cache,allow_other,default_permissions,entry_timeout=3600,attr_timeout=3600,"
          + "negative_timeout=3600,fsname=flatpull,subtype=flatpull");

  private static final System.Logger LOG = System.getLogger(LayerMount.class.getName());
  // Said once per process: the kernel engine could not mount, libfuse serves.
  private static final java.util.concurrent.atomic.AtomicBoolean FELL_BACK = new java.util.concurrent.atomic.AtomicBoolean();

  private final LayerFileSystem fs;
  private final Path mountPoint;
  // The kernel engine's session; null when libfuse serves.
  private final KernelSession kernel;

  private LayerMount(LayerFileSystem fs, Path mountPoint, KernelSession kernel) {
    this.fs = fs;
    this.mountPoint = mountPoint;
    this.kernel = kernel;
  }

  /** Mounts with {@code engine}, the kernel engine falling back to libfuse where it cannot mount. */
  public static LayerMount mount(LayerFileSystem fs, Path mountPoint, Engine engine) throws IOException {
    return mount(fs, mountPoint, engine, BackingFiles.NONE, 0);
  }

  /**
   * The kernel's passthrough, as a flag of its INIT offer: what {@code ignoredKernelFlags} takes to play a kernel
   * without it.
   */
  public static final long KERNEL_PASSTHROUGH = KernelSession.PASSTHROUGH;

  /**
   * Mounts with {@code engine}, the kernel engine falling back to libfuse where it cannot mount, and opening the
   * layer's complete files with passthrough on {@code backing}'s files where the kernel offers it (the kernel engine
   * alone; libfuse 2 cannot).
   *
   * @param ignoredKernelFlags flags of the kernel's INIT offer the engine takes as not offered (tests: a kernel without
   *     {@link #KERNEL_PASSTHROUGH}); 0 in production
   */
  public static LayerMount mount(LayerFileSystem fs, Path mountPoint, Engine engine, BackingFiles backing,
      long ignoredKernelFlags) throws IOException {
    if (engine == Engine.KERNEL) {
      if (!fs.bound()) {
        throw new IllegalStateException("a file system with no layer cannot be mounted");
      }
      clearStale(mountPoint);
      Files.createDirectories(mountPoint);
      try {
        return mountKernel(fs, mountPoint, backing, ignoredKernelFlags);
      } catch (KernelSession.Unavailable e) {
        if (FELL_BACK.compareAndSet(false, true)) {
          LOG.log(System.Logger.Level.WARNING, "the kernel FUSE engine cannot serve here (" + e.getMessage()
              + "); layers are mounted with libfuse");
        }
      }
    }
    return mount(fs, mountPoint, false, LOOP_THREADS);
  }

  private static LayerMount mountKernel(LayerFileSystem fs, Path mountPoint, BackingFiles backing, long ignored)
      throws IOException {
    KernelSession s = KernelSession.start(fs.tree(), fs.reader(), fs.events(), backing, ignored, mountPoint,
        LOOP_THREADS);
    try {
      CompletableFuture.anyOf(s.initialized(), s.ended()).get(MOUNT_TIMEOUT_SECONDS, TimeUnit.SECONDS);
      s.initialized().getNow(null);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      s.unmount();
      throw new java.io.InterruptedIOException("interrupted mounting " + mountPoint);
    } catch (ExecutionException | TimeoutException | java.util.concurrent.CompletionException e) {
      s.unmount();
      Throwable cause = e.getCause() != null ? e.getCause() : e;
      if (cause instanceof KernelSession.Unavailable u) {
        throw u;
      }
      throw new IOException("mounting a FUSE file system at " + mountPoint + " failed: " + cause, cause);
    }
    if (!s.initialized().isDone()) {
      s.unmount();
      throw new IOException("mounting a FUSE file system at " + mountPoint + " failed: the kernel ended the"
          + " connection before INIT");
    }
    return new LayerMount(fs, mountPoint.toAbsolutePath(), s);
  }

  /**
   * What another process needs to serve this mount in this one's place: the open FUSE device (this process's
   * descriptor; pass it with {@link DeviceHandover}) and what the kernel and the engine negotiated.
   */
  public record Connection(int device, byte[] negotiation) {}

  /** The mount's connection, for a process that will take it over; empty under libfuse, which owns its device. */
  public java.util.Optional<Connection> connection() {
    return kernel == null ? java.util.Optional.empty()
        : java.util.Optional.of(new Connection(kernel.device(), kernel.initialized().join().encode()));
  }

  /**
   * Serves the mount at {@code mountPoint} that another process made with the kernel engine and can no longer serve
   * (killed, or handing over), through its open FUSE {@code device} (received with {@link DeviceHandover}; this mount
   * owns it from here on) and its {@code negotiation} ({@link Connection}). {@code fs} must be the same layer, read
   * from the same index: the kernel knows the files by the node numbers the tree gave them. The requests the other
   * process read and never answered are asked for again, and answered here.
   */
  public static LayerMount resume(LayerFileSystem fs, Path mountPoint, int device, byte[] negotiation,
      BackingFiles backing) throws IOException {
    return resume(fs, mountPoint, device, negotiation, backing, true);
  }

  /**
   * Like {@link #resume(LayerFileSystem, Path, int, byte[], BackingFiles)}; with {@code resend} false, while the
   * other process still serves the mount beside this one (a planned handover), nothing is asked for again: call
   * {@link #resend} once it has exited.
   */
  public static LayerMount resume(LayerFileSystem fs, Path mountPoint, int device, byte[] negotiation,
      BackingFiles backing, boolean resend) throws IOException {
    if (!fs.bound()) {
      throw new IllegalStateException("a file system with no layer cannot serve a mount");
    }
    KernelSession.Init init = KernelSession.Init.decode(negotiation);
    KernelSession s = KernelSession.resume(device, init, fs.tree(), fs.reader(), fs.events(), backing, mountPoint,
        LOOP_THREADS, resend);
    return new LayerMount(fs, mountPoint.toAbsolutePath(), s);
  }

  /**
   * Asks the kernel to queue again every request of this mount read and not answered, by any process: those another
   * server read before it exited. A request this process is answering meanwhile is queued again too, and answered
   * twice, harmlessly: the kernel refuses the first answer (ENOENT, ignored) and takes the second. Kernel engine only.
   */
  public void resend() throws IOException {
    if (kernel == null) {
      throw new IllegalStateException("a libfuse mount cannot be asked to resend");
    }
    kernel.resend();
  }

  /** The engine serving this mount. */
  public Engine engine() {
    return kernel != null ? Engine.KERNEL : Engine.LIBFUSE;
  }

  /**
   * Requests of each kind the kernel has sent to this mount (the kernel engine counts them: reads, lookups, ...);
   * empty under libfuse.
   */
  public java.util.Map<String, Long> requests() {
    if (kernel == null) {
      return java.util.Map.of();
    }
    return java.util.Map.of("lookup", kernel.requests(KernelSession.LOOKUP), "getattr",
        kernel.requests(KernelSession.GETATTR), "read", kernel.requests(KernelSession.READ), "readdir",
        kernel.requests(KernelSession.READDIR), "readdirplus", kernel.requests(KernelSession.READDIRPLUS), "open",
        kernel.requests(KernelSession.OPEN) + kernel.requests(KernelSession.OPENDIR), "getxattr",
        kernel.requests(KernelSession.GETXATTR), "readlink", kernel.requests(KernelSession.READLINK), "release",
        kernel.requests(KernelSession.RELEASE), "flush", kernel.requests(KernelSession.FLUSH));
  }

  /** Opens the kernel engine answered with a backing file: reads of those never reached this process. */
  public long passthroughOpens() {
    return kernel == null ? 0 : kernel.passthroughOpens();
  }

  /**
   * Puts {@code bytes}, the verified content of the layer's file {@code path} (as its index names it) at
   * {@code offset}, into the kernel's page cache of that file, so that reads of it (through this mount or an overlay
   * on it) are served by the kernel. The kernel must know the file: look it up through the mount first. Does nothing
   * under libfuse, whose high-level API hides the kernel's node ids.
   *
   * @return the bytes stored; 0 when the kernel does not know the file, or it is not a regular file of the layer
   */
  public int store(String path, long offset, byte[] bytes) throws IOException {
    if (kernel == null) {
      return 0;
    }
    java.util.Optional<LayerTree.Node> n = fs.tree().lookup("/" + path.replaceFirst("^/+", ""));
    if (n.isEmpty()) {
      return 0;
    }
    return kernel.store(n.get(), offset, bytes, 0, bytes.length);
  }

  /** Pages {@link #store} has put into the kernel's page cache. */
  public long pagesStored() {
    return kernel == null ? 0 : kernel.pagesStored();
  }

  /** What the kernel engine negotiated with the kernel for this mount, in words; empty under libfuse. */
  public java.util.Optional<String> negotiated() {
    return kernel == null ? java.util.Optional.empty()
        : java.util.Optional.of(kernel.initialized().join().describe());
  }

  /**
   * Mounts {@code fs} at {@code mountPoint} (created if needed) and returns once the kernel serves it. A stale mount
   * left by a killed process (ENOTCONN) is lazily unmounted first.
   */
  public static LayerMount mount(LayerFileSystem fs, Path mountPoint) throws IOException {
    return mount(fs, mountPoint, DEFAULT_ENGINE);
  }

  /** The engine a mount that names none takes: what {@code [fuse] engine} defaults to. */
  public static final Engine DEFAULT_ENGINE = dev.flatpull.config.FuseSettings.DEFAULTS.engine();

  /**
   * Mounts with libfuse; {@code singleThreaded} runs libfuse's single-threaded loop ({@code -s})
   * instead of the multi-threaded one, which only the benchmark that compares the two should want: with one thread,
   * a read waiting for the registry stalls every other read of the layer.
   */
  public static LayerMount mount(LayerFileSystem fs, Path mountPoint, boolean singleThreaded) throws IOException {
    return mount(fs, mountPoint, singleThreaded, LOOP_THREADS);
  }

  /**
   * A thread of its own for each of a mount's FUSE workers (see {@link FuseSession}), each as long as it serves, ahead
   * of the services whose reads it answers ({@link CpuPriority}).
   */
  public static final Executor LOOP_THREADS = worker -> CpuPriority.ahead("flatpull-fuse").newThread(worker).start();

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
    LibfuseFileSystem lf = fs.libfuse();
    CompletableFuture<Void> loopEnded = FuseSession.start(lf.operations(), "flatpull", at, options, loopThreads);
    lf.mountedAt(at);
    try {
      CompletableFuture.anyOf(lf.initialized(), loopEnded).get(MOUNT_TIMEOUT_SECONDS, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      lf.umount();
      throw new java.io.InterruptedIOException("interrupted mounting " + mountPoint);
    } catch (ExecutionException | TimeoutException e) {
      lf.umount();
      Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
      throw new IOException("mounting a FUSE file system at " + mountPoint + " failed: " + cause, cause);
    }
    if (!lf.initialized().isDone()) {
      lf.umount();
      throw new IOException("mounting a FUSE file system at " + mountPoint + " failed: libfuse ended before the"
          + " kernel initialised the mount (is /dev/fuse usable and fusermount installed?)");
    }
    return new LayerMount(fs, mountPoint, null);
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
    dev.flatpull.core.HostCommand.run("fusermount", "-u", "-z", mountPoint.toString());
  }

  public Path mountPoint() {
    return mountPoint;
  }

  /** Unmounts, and returns once the kernel no longer lists the mount (at most about ten seconds). */
  @Override
  public void close() {
    if (kernel != null) {
      kernel.unmount();
    } else {
      fs.libfuse().umount();
    }
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
