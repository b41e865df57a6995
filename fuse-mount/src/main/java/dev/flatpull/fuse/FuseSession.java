package dev.flatpull.fuse;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import jnr.ffi.LibraryLoader;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;
import jnr.ffi.byref.IntByReference;
import jnr.ffi.byref.PointerByReference;
import jnr.ffi.types.size_t;
import ru.serce.jnrfuse.struct.FuseOperations;

/**
 * libfuse 2's session loop for one mount, run on Java threads the mount owns instead of libfuse's own (what
 * {@code fuse_main} would do: {@code fuse_setup}, workers that receive and process requests, {@code fuse_teardown}).
 *
 * <p>Why: a libfuse worker is a native thread the JVM does not know, and jnr-fuse's callbacks (jffi closures) attach
 * it to the JVM before every callback and detach it after, until that thread has been attached a thousand times.
 * That cost about 100 µs of each FUSE operation here (a getxattr took 130 µs against 35 µs on an attached thread), and
 * a cold start makes hundreds of them: lookups, getattrs, overlayfs's xattr queries, opens, reads, releases. A Java
 * thread is attached once, when it starts, so a callback on it costs nothing extra.
 *
 * <p>Its workers are {@link SessionWorkers}.
 */
final class FuseSession {
  /** The part of libfuse 2's API that {@code fuse_main} is made of (fuse.h, fuse_lowlevel.h). */
  public interface Lib {
    Pointer fuse_setup(int argc, String[] argv, FuseOperations op, @size_t long opSize, PointerByReference mountpoint,
        IntByReference multithreaded, Pointer userData);

    void fuse_teardown(Pointer fuse, Pointer mountpoint);

    Pointer fuse_get_session(Pointer fuse);

    Pointer fuse_session_next_chan(Pointer session, Pointer chan);

    @size_t long fuse_chan_bufsize(Pointer chan);

    /** @param chan a {@code struct fuse_chan **}: the channel in, the one the request came from out */
    int fuse_chan_recv(Pointer chan, Pointer buf, @size_t long size);

    void fuse_session_process(Pointer session, Pointer buf, @size_t long len, Pointer chan);

    int fuse_session_exited(Pointer session);

    void fuse_session_exit(Pointer session);
  }

  /** Loaded once: the same library jnr-fuse binds. */
  private static final class Holder {
    static final Lib LIB = LibraryLoader.create(Lib.class).failImmediately().load("fuse");
  }

  private static final int EINTR = 4;
  private static final int FUSE_FORGET = 2;
  private static final int FUSE_BATCH_FORGET = 42;

  private final Lib lib;
  private final Pointer fuse;
  private final Pointer mountpointName;
  private final Pointer session;
  private final Pointer chan;
  private final long bufferSize;
  private final SessionWorkers workers;
  private final CompletableFuture<Void> ended = new CompletableFuture<>();
  private final jnr.ffi.Runtime runtime;

  private FuseSession(Lib lib, Pointer fuse, Pointer mountpointName, boolean multithreaded, Executor threads) {
    this.lib = lib;
    this.fuse = fuse;
    this.mountpointName = mountpointName;
    this.session = lib.fuse_get_session(fuse);
    this.chan = lib.fuse_session_next_chan(session, null);
    this.bufferSize = lib.fuse_chan_bufsize(chan);
    this.workers = new SessionWorkers(multithreaded ? SessionWorkers.MAX_WORKERS : 1, threads, this::work);
    this.runtime = jnr.ffi.Runtime.getRuntime(lib);
  }

  /**
   * Mounts {@code operations} at {@code mountPoint} with libfuse's command-line {@code options} (in the foreground:
   * {@code -f} is added; {@code -s} means one worker) and starts serving on {@code threads}, each task of which is a
   * worker that runs until the session ends.
   *
   * @return completes when the last worker has ended and the session is torn down
   * @throws IOException when libfuse cannot mount (its reason is on standard error)
   */
  static CompletableFuture<Void> start(FuseOperations operations, String fsName, Path mountPoint, List<String> options,
      Executor threads) throws IOException {
    Lib lib = Holder.LIB;
    String[] argv = new String[options.size() + 3];
    argv[0] = fsName;
    argv[1] = "-f";
    argv[2] = mountPoint.toAbsolutePath().toString();
    for (int i = 0; i < options.size(); i++) {
      argv[i + 3] = options.get(i);
    }
    PointerByReference name = new PointerByReference();
    IntByReference multithreaded = new IntByReference();
    Pointer fuse = lib.fuse_setup(argv.length, argv, operations, jnr.ffi.Struct.size(operations), name,
        multithreaded, null);
    if (fuse == null) {
      throw new IOException("libfuse could not mount at " + mountPoint + " (is /dev/fuse usable and fusermount"
          + " installed?)");
    }
    FuseSession s = new FuseSession(lib, fuse, name.getValue(), multithreaded.intValue() != 0, threads);
    if (!s.workers.start()) {
      lib.fuse_teardown(fuse, name.getValue());
      throw new IOException("no thread to serve the FUSE mount at " + mountPoint);
    }
    return s.ended;
  }

  private void work() {
    Pointer buf = Memory.allocateDirect(runtime, (int) bufferSize);
    Pointer from = Memory.allocateDirect(runtime, runtime.addressSize());
    // Whether this worker is counted among those waiting for a request (it is, as it starts).
    boolean idle = true;
    try {
      while (lib.fuse_session_exited(session) == 0) {
        from.putPointer(0, chan);
        int n = lib.fuse_chan_recv(from, buf, bufferSize);
        if (n == -EINTR) {
          continue;
        }
        if (n <= 0) {
          // 0: unmounted (ENODEV) or the session exited; below 0, a device error libfuse has reported.
          if (n < 0) {
            lib.fuse_session_exit(session);
          }
          return;
        }
        int opcode = buf.getInt(4);
        boolean forget = opcode == FUSE_FORGET || opcode == FUSE_BATCH_FORGET;
        // A forget leaves its worker counted among those waiting.
        idle = forget;
        workers.took(forget);
        lib.fuse_session_process(session, buf, n, from.getPointer(0));
        idle = true;
        if (workers.served(forget)) {
          return;
        }
      }
    } catch (RuntimeException | Error e) {
      lib.fuse_session_exit(session);
      throw e;
    } finally {
      if (workers.ended(idle)) {
        finish();
      }
    }
  }

  /** Unmounts (if the kernel still has the mount), frees the session; once, by the last worker. */
  private void finish() {
    synchronized (this) {
      if (ended.isDone()) {
        return;
      }
      lib.fuse_teardown(fuse, mountpointName);
      ended.complete(null);
    }
  }
}
