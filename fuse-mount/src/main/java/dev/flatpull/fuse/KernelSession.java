package dev.flatpull.fuse;

import dev.flatpull.fuse.LayerTree.Node;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicLongArray;
import jnr.ffi.Pointer;

/**
 * The kernel engine: one layer's file system served by speaking the kernel's FUSE protocol over {@code /dev/fuse}
 * ({@code include/uapi/linux/fuse.h}), as go-fuse does, with no library between. It mounts with {@code mount(2)}, so it
 * needs CAP_SYS_ADMIN (the manager runs as root); {@link LayerMount} falls back to libfuse where it cannot.
 *
 * <p>What it negotiates that libfuse 2 cannot: reads of up to {@link #MAX_PAGES} pages, READDIRPLUS (a listing brings
 * its entries' attributes, so no lookup follows each name), no round trip for open and opendir (answered ENOSYS once;
 * the kernel then opens with its cache kept, as {@code kernel_cache} did), cached symlinks, parallel directory
 * operations, and no invalidation of cached pages but on request: a layer never changes. Entries, attributes and
 * missing names are valid for an hour, as under libfuse.
 *
 * <p>Node ids are the tree's inode numbers (the root is 1 in both); the tree is immutable and lives as long as the
 * mount, so forgets need no bookkeeping. Every request catches everything: a failed fetch or verification answers EIO,
 * never wrong bytes, and is reported to {@link FuseEvents}, as in {@link LibfuseFileSystem}.
 */
final class KernelSession {
  private static final System.Logger LOG = System.getLogger(KernelSession.class.getName());

  /** 1 MiB reads: the most the kernel allows by default ({@code fuse_max_pages_limit}, 256). */
  static final int MAX_PAGES = 256;
  static final int MAX_READ = MAX_PAGES * 4096;
  /** The oldest protocol served: 7.28 brought {@code max_pages}; kernels since 5.0 speak it. */
  static final int MIN_MINOR = 28;
  /** The newest protocol whose structures this engine writes: 7.40 brought passthrough's. */
  static final int OUR_MINOR = 40;
  private static final long VALID_SECONDS = 3600;
  private static final int IN_HEADER = 40;
  private static final int OUT_HEADER = 16;
  // Nothing is written to a read-only mount; the smallest max_write keeps each worker's request buffer small.
  private static final int MAX_WRITE = 4096;
  // The kernel refuses a read of the device into less than 8 KiB, or a header, a write's header and max_write; the
  // largest request a read-only mount is sent is a lookup or getxattr of a 255-byte name, or a batch of forgets, which
  // the kernel cuts to fit.
  private static final int IN_BUFFER = 16 << 10;
  /** Every answer but a read's or a listing's fits (xattr values and lists are at most 64 KiB). */
  private static final int SMALL_ANSWER = 128 << 10;
  private static final int ENTRY_OUT = 128;
  private static final int ATTR = 88;

  // Opcodes (enum fuse_opcode).
  static final int LOOKUP = 1;
  static final int FORGET = 2;
  static final int GETATTR = 3;
  static final int READLINK = 5;
  static final int OPEN = 14;
  static final int READ = 15;
  static final int STATFS = 17;
  static final int RELEASE = 18;
  static final int GETXATTR = 22;
  static final int LISTXATTR = 23;
  static final int FLUSH = 25;
  static final int INIT = 26;
  static final int OPENDIR = 27;
  static final int READDIR = 28;
  static final int RELEASEDIR = 29;
  static final int ACCESS = 34;
  static final int INTERRUPT = 36;
  static final int DESTROY = 38;
  static final int BATCH_FORGET = 42;
  static final int READDIRPLUS = 44;
  private static final int OPCODES = 64;

  // INIT flags (fuse_init_in.flags, and flags2 shifted by 32).
  static final long ASYNC_READ = 1L << 0;
  static final long DO_READDIRPLUS = 1L << 13;
  static final long NO_OPEN_SUPPORT = 1L << 17;
  static final long PARALLEL_DIROPS = 1L << 18;
  static final long MAX_PAGES_FLAG = 1L << 22;
  static final long CACHE_SYMLINKS = 1L << 23;
  static final long NO_OPENDIR_SUPPORT = 1L << 24;
  static final long EXPLICIT_INVAL_DATA = 1L << 25;
  static final long INIT_EXT = 1L << 30;
  /** FUSE_PASSTHROUGH (in flags2): files opened with a backing file the kernel reads itself. */
  static final long PASSTHROUGH = 1L << 37;
  /**
   * FUSE_HAS_RESEND (in flags2, Linux 6.9): the kernel can queue again the requests a server read and never answered
   * ({@link #resend}). Only offered, never asked for.
   */
  static final long HAS_RESEND = 1L << 39;
  /** What this engine asks for, of what the kernel offers; {@link #PASSTHROUGH} too when it has backing files. */
  static final long WANTED = ASYNC_READ | DO_READDIRPLUS | NO_OPEN_SUPPORT | PARALLEL_DIROPS | MAX_PAGES_FLAG
      | CACHE_SYMLINKS | NO_OPENDIR_SUPPORT | EXPLICIT_INVAL_DATA | INIT_EXT;
  /**
   * The stack depth a passthrough mount declares: its backing files on a plain file system (depth 0), so that the
   * mount itself (then of depth 1) can still be a lower layer of the container's overlayfs, whose depth is at most 2.
   */
  private static final int MAX_STACK_DEPTH = 1;

  // Open flags (fuse_open_out.open_flags).
  private static final int FOPEN_KEEP_CACHE = 1 << 1;
  private static final int FOPEN_NOFLUSH = 1 << 5;
  private static final int FOPEN_PASSTHROUGH = 1 << 7;
  /** A handle's {@code fh}: what {@link #release} is told the open was. */
  private static final long FH_CACHED = 0;
  private static final long FH_PASSTHROUGH = 1;

  /**
   * The kernel's INIT and this engine's answer.
   *
   * @param offered the flags the kernel offered (flags2 in the upper half)
   * @param granted those this engine took
   */
  record Init(int kernelMajor, int kernelMinor, int minor, long offered, long granted, int maxPages,
      int maxReadahead, boolean passthroughWanted) {
    boolean has(long flag) {
      return (granted & flag) != 0;
    }

    private static final byte FORMAT = 1;
    private static final int ENCODED = 1 + 4 * 5 + 8 * 2 + 1;

    /** What a process taking over the connection needs of this negotiation ({@link #decode}). */
    byte[] encode() {
      ByteBuffer b = ByteBuffer.allocate(ENCODED).order(ByteOrder.LITTLE_ENDIAN);
      b.put(FORMAT).putInt(kernelMajor).putInt(kernelMinor).putInt(minor).putInt(maxPages).putInt(maxReadahead)
          .putLong(offered).putLong(granted).put((byte) (passthroughWanted ? 1 : 0));
      return b.array();
    }

    /** The negotiation {@link #encode} wrote; a malformed or foreign one is refused. */
    static Init decode(byte[] bytes) throws IOException {
      if (bytes.length != ENCODED || bytes[0] != FORMAT) {
        throw new IOException("not a FUSE negotiation this engine wrote (" + bytes.length + " bytes, format "
            + (bytes.length > 0 ? bytes[0] : -1) + ")");
      }
      ByteBuffer b = ByteBuffer.wrap(bytes, 1, ENCODED - 1).order(ByteOrder.LITTLE_ENDIAN);
      int major = b.getInt();
      int kernelMinor = b.getInt();
      int minor = b.getInt();
      int maxPages = b.getInt();
      int maxReadahead = b.getInt();
      long offered = b.getLong();
      long granted = b.getLong();
      boolean passthroughWanted = b.get() == 1;
      if (major != 7 || minor < MIN_MINOR || minor > OUR_MINOR || (granted & ~offered) != 0) {
        throw new IOException("a FUSE negotiation this engine cannot serve: 7." + minor + ", granted 0x"
            + Long.toHexString(granted) + " of 0x" + Long.toHexString(offered));
      }
      return new Init(major, kernelMinor, minor, offered, granted, maxPages, maxReadahead, passthroughWanted);
    }

    /** Whether opens are answered (passthrough) rather than left to the kernel (ENOSYS once). */
    boolean answersOpens() {
      return has(PASSTHROUGH);
    }

    /** One line for the log: what was negotiated. */
    String describe() {
      return String.format(java.util.Locale.ROOT,
          "kernel FUSE %d.%d, serving 7.%d: reads up to %d KiB, readahead %d KiB, readdirplus %s, open %s, opendir %s,"
              + " cached symlinks %s, parallel dirops %s, passthrough %s (offered 0x%x, granted 0x%x)",
          kernelMajor, kernelMinor, minor, maxPages * 4, maxReadahead >> 10, yes(DO_READDIRPLUS),
          answersOpens() ? "answered" : has(NO_OPEN_SUPPORT) ? "without a round trip" : "answered",
          has(NO_OPENDIR_SUPPORT) ? "without a round trip" : "answered", yes(CACHE_SYMLINKS), yes(PARALLEL_DIROPS),
          has(PASSTHROUGH) ? "yes" : !passthroughWanted ? "no (not asked for)"
              : "no (the kernel does not offer it: complete files are read through FUSE)", offered, granted);
    }

    private String yes(long flag) {
      return has(flag) ? "yes" : "no";
    }
  }

  private final Libc libc = Libc.Holder.LIBC;
  private final int fd;
  private final Path mountPoint;
  private final LayerTree tree;
  private final LayerContentReader reader;
  private final FuseEvents events;
  private final BackingFiles backing;
  // Flags of the kernel's offer taken as not offered: how a test plays a kernel without a feature.
  private final long ignored;
  private final SessionWorkers workers;
  private final CompletableFuture<Init> initialized = new CompletableFuture<>();
  private final CompletableFuture<Void> ended = new CompletableFuture<>();
  private final AtomicLongArray requests = new AtomicLongArray(OPCODES);
  private final java.util.concurrent.atomic.AtomicLong pagesStored = new java.util.concurrent.atomic.AtomicLong();
  // One notification at a time: its buffer is reused, and the kernel takes them one by one anyway.
  private final Object storing = new Object();
  private ByteBuffer storeBuffer;
  private Pointer storeAt;
  // The open handles of each file, by node id: the kernel requires every open of a file to be of one kind (cached or
  // passthrough) and every passthrough open to name the same backing file, or it fails the open with EIO.
  private final java.util.Map<Long, Opened> opened = new java.util.HashMap<>();
  private final java.util.concurrent.atomic.AtomicLong passthroughOpens = new java.util.concurrent.atomic.AtomicLong();
  // Cleared when the kernel refuses a backing file (no CAP_SYS_ADMIN in its namespace, a backing file system too
  // deep): from then on every file of the mount is opened cached.
  private volatile boolean passthrough = true;

  /** A file's open handles: cached ones, or passthrough ones sharing {@code backingId}. */
  private static final class Opened {
    int cached;
    int passthrough;
    int backingId;
  }

  private KernelSession(int fd, Path mountPoint, LayerTree tree, LayerContentReader reader, FuseEvents events,
      BackingFiles backing, long ignored, Executor threads) {
    this.fd = fd;
    this.mountPoint = mountPoint;
    this.tree = tree;
    this.reader = reader;
    this.events = events;
    this.backing = backing;
    this.ignored = ignored;
    this.workers = new SessionWorkers(SessionWorkers.MAX_WORKERS, threads, this::work);
  }

  /** Why the kernel engine cannot serve on this node; the mount falls back to libfuse. */
  static final class Unavailable extends IOException {
    Unavailable(String message) {
      super(message);
    }
  }

  /**
   * Mounts {@code tree} read-only at {@code mountPoint} with {@code ro,nosuid,nodev,allow_other,default_permissions}
   * and starts serving on {@code threads} (each task a worker that runs until the session ends).
   *
   * @throws Unavailable when this process cannot open the device or mount it (no CAP_SYS_ADMIN, no FUSE)
   */
  static KernelSession start(LayerTree tree, LayerContentReader reader, FuseEvents events, BackingFiles backing,
      long ignored, Path mountPoint, Executor threads) throws IOException {
    Libc libc;
    try {
      libc = Libc.Holder.LIBC;
    } catch (LinkageError e) {
      throw new Unavailable("libc cannot be bound: " + e);
    }
    int fd = libc.open("/dev/fuse", Libc.O_RDWR | Libc.O_CLOEXEC);
    if (fd < 0) {
      throw new Unavailable("/dev/fuse cannot be opened: errno " + Libc.Holder.errno());
    }
    String at = mountPoint.toAbsolutePath().toString();
    String data = "fd=" + fd + ",rootmode=40000,user_id=" + libc.getuid() + ",group_id=" + libc.getgid()
        + ",allow_other,default_permissions";
    if (libc.mount("flatpull", at, "fuse.flatpull", Libc.MS_RDONLY | Libc.MS_NOSUID | Libc.MS_NODEV, data) != 0) {
      int errno = Libc.Holder.errno();
      libc.close(fd);
      if (errno == Libc.EPERM) {
        throw new Unavailable("mount(2) of a FUSE file system needs CAP_SYS_ADMIN");
      }
      throw new IOException("mount(2) of a FUSE file system at " + at + " failed: errno " + errno);
    }
    KernelSession s = new KernelSession(fd, mountPoint.toAbsolutePath(), tree, reader, events, backing, ignored,
        threads);
    if (!s.workers.start()) {
      s.unmount();
      throw new IOException("no thread to serve the FUSE mount at " + at);
    }
    return s;
  }

  /**
   * Serves the FUSE connection {@code fd} of the mount at {@code mountPoint}, which another process mounted, negotiated
   * as {@code init} and served until it stopped (it was killed or handed the connection over): the kernel kept the
   * connection, and queued the containers' requests, because a process that does not stop with the server holds the
   * same open device. {@code tree} must number its nodes as the earlier server's did (the same layer index gives the
   * same numbers): the kernel's cached lookups name them. The requests the earlier server read and never answered
   * are asked for again ({@link #resend}).
   */
  static KernelSession resume(int fd, Init init, LayerTree tree, LayerContentReader reader, FuseEvents events,
      BackingFiles backing, Path mountPoint, Executor threads, boolean resend) throws IOException {
    KernelSession s = new KernelSession(fd, mountPoint.toAbsolutePath(), tree, reader, events, backing, 0, threads);
    s.initialized.complete(init);
    if (!s.workers.start()) {
      throw new IOException("no thread to serve the FUSE mount at " + mountPoint);
    }
    LOG.log(System.Logger.Level.INFO, mountPoint + ": taken over (" + init.describe() + ")");
    if (resend) {
      s.resend();
    }
    return s;
  }

  private static final int NOTIFY_RESEND = 7;

  /**
   * Asks the kernel to queue again every request read from this connection and not answered
   * ({@code FUSE_NOTIFY_RESEND}): those a server in another process read before it died. Without it (a kernel before
   * 6.9) those wait for ever: a log line says so, and every other request is served.
   */
  void resend() throws IOException {
    if ((initialized.join().offered() & HAS_RESEND) == 0) {
      LOG.log(System.Logger.Level.WARNING, mountPoint + ": the kernel cannot resend requests (FUSE_HAS_RESEND, Linux"
          + " 6.9); a request the earlier server read and did not answer stays unanswered");
      return;
    }
    ByteBuffer b = ByteBuffer.allocateDirect(OUT_HEADER).order(ByteOrder.nativeOrder());
    b.putInt(0, OUT_HEADER).putInt(4, NOTIFY_RESEND).putLong(8, 0);
    if (libc.write(fd, Pointer.wrap(Libc.Holder.RUNTIME, b), OUT_HEADER) < 0) {
      throw new IOException("FUSE_NOTIFY_RESEND to " + mountPoint + " failed: errno " + Libc.Holder.errno());
    }
  }

  /** The open FUSE device this session serves; another process given it can take the mount over. */
  int device() {
    return fd;
  }

  /** Completes with what was negotiated once the kernel's INIT is answered: from then on the mount serves. */
  CompletableFuture<Init> initialized() {
    return initialized;
  }

  /** Completes when the kernel has ended the connection and the last worker has closed the device. */
  CompletableFuture<Void> ended() {
    return ended;
  }

  /** Requests of {@code opcode} the kernel sent so far. */
  long requests(int opcode) {
    return requests.get(opcode);
  }

  /** Opens answered with a backing file ({@code FOPEN_PASSTHROUGH}): their reads never reach this process. */
  long passthroughOpens() {
    return passthroughOpens.get();
  }

  /** Pages pushed into the kernel's page cache by {@link #store}. */
  long pagesStored() {
    return pagesStored.get();
  }

  /** The notification that puts a file's bytes into the kernel's page cache (enum fuse_notify_code). */
  private static final int NOTIFY_STORE = 4;
  private static final int PAGE = 4096;
  private static final int STORE_PIECE = 1 << 20;

  /**
   * Pushes {@code bytes[from, from + length)}, the bytes of regular file {@code node} at {@code offset}, into the
   * kernel's page cache of the file ({@code FUSE_NOTIFY_STORE}), so that reads of them never reach this process. Only
   * whole pages go (the kernel leaves a partly written page unread), and the last partial page of the file; the
   * kernel must know the file (it has looked it up), else nothing is stored.
   *
   * @return the bytes stored
   */
  int store(Node node, long offset, byte[] bytes, int from, int length) throws IOException {
    if (node.kind() != LayerTree.Kind.REG || length <= 0) {
      return 0;
    }
    long size = node.size();
    long start = (offset + PAGE - 1) / PAGE * PAGE;
    long end = Math.min(offset + length, size);
    if (end < size) {
      end = end / PAGE * PAGE;
    }
    int stored = 0;
    synchronized (storing) {
      if (storeBuffer == null) {
        storeBuffer = ByteBuffer.allocateDirect(OUT_HEADER + 24 + STORE_PIECE).order(ByteOrder.nativeOrder());
        storeAt = Pointer.wrap(Libc.Holder.RUNTIME, storeBuffer);
      }
      for (long at = start; at < end; at += STORE_PIECE) {
        int n = (int) Math.min(STORE_PIECE, end - at);
        storeBuffer.putInt(0, OUT_HEADER + 24 + n);
        storeBuffer.putInt(4, NOTIFY_STORE);
        storeBuffer.putLong(8, 0);
        storeBuffer.putLong(OUT_HEADER, node.ino());
        storeBuffer.putLong(OUT_HEADER + 8, at);
        storeBuffer.putInt(OUT_HEADER + 16, n);
        storeBuffer.putInt(OUT_HEADER + 20, 0);
        storeBuffer.put(OUT_HEADER + 24, bytes, from + (int) (at - offset), n);
        if (libc.write(fd, storeAt, OUT_HEADER + 24 + n) < 0) {
          int errno = Libc.Holder.errno();
          if (errno == Libc.ENOENT) {
            // The kernel has no inode for the file (never looked up, or forgotten): its reads will ask.
            return stored;
          }
          throw new IOException("FUSE_NOTIFY_STORE to " + mountPoint + " failed: errno " + errno);
        }
        stored += n;
        pagesStored.addAndGet((n + PAGE - 1) / PAGE);
      }
    }
    return stored;
  }

  /** Detaches the mount; the connection ends once nothing in it is open any more, and with it the workers. */
  void unmount() {
    libc.umount2(mountPoint.toString(), Libc.MNT_DETACH);
  }

  private void work() {
    ByteBuffer in = ByteBuffer.allocateDirect(IN_BUFFER).order(ByteOrder.nativeOrder());
    Pointer inAt = Pointer.wrap(Libc.Holder.RUNTIME, in);
    Answer answer = new Answer();
    boolean idle = true;
    try {
      while (true) {
        long n = libc.read(fd, inAt, IN_BUFFER);
        if (n < 0) {
          int errno = Libc.Holder.errno();
          // ENOENT: the request was interrupted before it was read.
          if (errno == Libc.EINTR || errno == Libc.ENOENT || errno == Libc.EAGAIN) {
            continue;
          }
          if (errno != Libc.ENODEV) {
            LOG.log(System.Logger.Level.WARNING, "reading /dev/fuse for " + mountPoint + " failed: errno " + errno);
          }
          return;
        }
        int opcode = in.getInt(4);
        boolean forget = opcode == FORGET || opcode == BATCH_FORGET;
        idle = forget;
        workers.took(forget);
        if (opcode >= 0 && opcode < OPCODES) {
          requests.incrementAndGet(opcode);
        }
        answer.fit(opcode == READ || opcode == READDIR || opcode == READDIRPLUS
            ? Math.min(in.getInt(IN_HEADER + 16), MAX_READ) : SMALL_ANSWER);
        int length = serve(in, (int) n, answer.out);
        if (length > 0) {
          // ENOENT: the request was interrupted meanwhile; nobody waits for the answer.
          libc.write(fd, answer.at, length);
        }
        idle = true;
        if (workers.served(forget)) {
          return;
        }
      }
    } finally {
      if (workers.ended(idle)) {
        libc.close(fd);
        initialized.completeExceptionally(new IOException("the kernel ended the FUSE connection before INIT"));
        ended.complete(null);
      }
    }
  }

  /**
   * A worker's answer buffer, which a read's bytes are copied into straight from the page cache, grown to the largest
   * answer the worker has had to give: most are a few hundred bytes, a read's as large as the kernel's readahead
   * window (128 KiB by default), and only a read the kernel asks 1 MiB for needs 1 MiB. Sixty-four workers on each of
   * many mounts must not each hold 1 MiB for it.
   */
  private static final class Answer {
    ByteBuffer out;
    Pointer at;

    Answer() {
      fit(SMALL_ANSWER);
    }

    void fit(int payload) {
      int need = Math.max(payload, SMALL_ANSWER);
      if (out == null || out.capacity() < OUT_HEADER + need) {
        out = ByteBuffer.allocateDirect(OUT_HEADER + need).order(ByteOrder.nativeOrder());
        at = Pointer.wrap(Libc.Holder.RUNTIME, out);
      }
    }
  }

  /** Answers one request into {@code out}; returns the answer's length, 0 for none. */
  private int serve(ByteBuffer in, int length, ByteBuffer out) {
    int opcode = in.getInt(4);
    long unique = in.getLong(8);
    long nodeid = in.getLong(16);
    int errno;
    try {
      int size = switch (opcode) {
        case INIT -> init(in, out);
        case LOOKUP -> lookup(nodeid, cString(in, IN_HEADER, length), out);
        case GETATTR -> getattr(nodeid, out);
        case READLINK -> readlink(nodeid, out);
        case OPEN -> initialized.getNow(null) != null && initialized.getNow(null).answersOpens()
            ? open(nodeid, out)
            // No open needs an answer: the kernel opens every file itself from now on, keeping its cache.
            : -Libc.ENOSYS;
        case OPENDIR -> -Libc.ENOSYS;
        case READ -> read(nodeid, in.getLong(IN_HEADER + 8), in.getInt(IN_HEADER + 16), out);
        case READDIR, READDIRPLUS -> readdir(nodeid, in.getLong(IN_HEADER + 8), in.getInt(IN_HEADER + 16),
            opcode == READDIRPLUS, out);
        // ENOSYS once for a layer without xattrs: the kernel then answers every getxattr of the mount EOPNOTSUPP
        // itself, which overlayfs and the capability check take for "absent", as they do ENODATA.
        case GETXATTR -> tree.hasXattrs()
            ? getxattr(nodeid, in.getInt(IN_HEADER), cString(in, IN_HEADER + 8, length), out) : -Libc.ENOSYS;
        case LISTXATTR -> listxattr(nodeid, in.getInt(IN_HEADER), out);
        case STATFS -> statfs(out);
        case RELEASE -> release(nodeid, in.getLong(IN_HEADER));
        // A read-only file has nothing to flush: answered ENOSYS once, the kernel sends no FLUSH again. Otherwise every
        // close(2) of a file opened without a round trip waits for one.
        case FLUSH -> -Libc.ENOSYS;
        case RELEASEDIR, DESTROY -> 0;
        case FORGET, BATCH_FORGET, INTERRUPT -> Integer.MIN_VALUE;
        case ACCESS -> -Libc.ENOSYS;
        default -> -Libc.ENOSYS;
      };
      if (size == Integer.MIN_VALUE) {
        return 0;
      }
      if (size >= 0) {
        return header(out, unique, 0, size);
      }
      errno = -size;
    } catch (Throwable t) {
      errno = Libc.EIO;
      String path = pathOf(nodeid);
      LOG.log(System.Logger.Level.WARNING, name(opcode) + " " + path + " failed: " + t);
      try {
        events.operationFailed(name(opcode), path, -errno, t);
      } catch (RuntimeException ignored) {
        // A listener must not turn an EIO into a crash.
      }
    }
    return header(out, unique, errno, 0);
  }

  private static int header(ByteBuffer out, long unique, int errno, int size) {
    out.putInt(0, OUT_HEADER + size);
    out.putInt(4, -errno);
    out.putLong(8, unique);
    return OUT_HEADER + size;
  }

  private int init(ByteBuffer in, ByteBuffer out) {
    int major = in.getInt(IN_HEADER);
    int minor = in.getInt(IN_HEADER + 4);
    int maxReadahead = in.getInt(IN_HEADER + 8);
    long offered = in.getInt(IN_HEADER + 12) & 0xffffffffL;
    if (major != 7 || minor < MIN_MINOR) {
      // Answered with our major alone, as the protocol says; the kernel then fails the mount.
      initialized.completeExceptionally(new Unavailable("the kernel speaks FUSE " + major + "." + minor
          + "; this engine needs 7." + MIN_MINOR + " or later"));
      out.putInt(OUT_HEADER, 7);
      out.putInt(OUT_HEADER + 4, OUR_MINOR);
      return 8;
    }
    if ((offered & INIT_EXT) != 0) {
      offered |= (in.getInt(IN_HEADER + 16) & 0xffffffffL) << 32;
    }
    offered &= ~ignored;
    long granted = offered & (backing.enabled() ? WANTED | PASSTHROUGH : WANTED);
    int served = Math.min(minor, OUR_MINOR);
    ByteBuffer o = out.slice(OUT_HEADER, 64).order(ByteOrder.nativeOrder());
    for (int i = 0; i < 64; i += 4) {
      o.putInt(i, 0);
    }
    o.putInt(0, 7);
    o.putInt(4, served);
    o.putInt(8, maxReadahead);
    o.putInt(12, (int) granted);
    o.putShort(16, (short) SessionWorkers.MAX_WORKERS);
    o.putShort(18, (short) (SessionWorkers.MAX_WORKERS * 3 / 4));
    o.putInt(20, MAX_WRITE);
    o.putInt(24, 1);
    o.putShort(28, (short) MAX_PAGES);
    o.putInt(32, (int) (granted >>> 32));
    o.putInt(36, (granted & PASSTHROUGH) != 0 ? MAX_STACK_DEPTH : 0);
    Init init = new Init(major, minor, served, offered, granted, (granted & MAX_PAGES_FLAG) != 0 ? MAX_PAGES : 32,
        maxReadahead, backing.enabled());
    LOG.log(System.Logger.Level.INFO, mountPoint + ": " + init.describe());
    initialized.complete(init);
    return 64;
  }

  private Optional<Node> node(long nodeid) {
    return tree.node(nodeid);
  }

  private int lookup(long parent, String name, ByteBuffer out) {
    Optional<Node> dir = node(parent);
    if (dir.isEmpty()) {
      return -Libc.ENOENT;
    }
    if (dir.get().kind() != LayerTree.Kind.DIR) {
      return -Libc.ENOTDIR;
    }
    Optional<Node> n = tree.child(dir.get(), name);
    if (n.isEmpty()) {
      // Node id 0 with a validity: the kernel remembers that the name is missing, for as long as a found one.
      entry(out, OUT_HEADER, null);
      return ENTRY_OUT;
    }
    entry(out, OUT_HEADER, n.get());
    return ENTRY_OUT;
  }

  /**
   * Answers an open (only on a passthrough mount; otherwise opens are never sent). A regular file whose backing file
   * is assembled opens with {@code FOPEN_PASSTHROUGH}, unless it is open cached now; every other open is cached, its
   * pages kept across opens (those {@link #store} pushed too) and no flush asked for on close.
   */
  private int open(long nodeid, ByteBuffer out) throws IOException {
    Optional<Node> n = node(nodeid);
    if (n.isEmpty()) {
      return -Libc.ENOENT;
    }
    Node node = n.get();
    long fh = FH_CACHED;
    int flags = FOPEN_KEEP_CACHE | FOPEN_NOFLUSH;
    int backingId = 0;
    synchronized (opened) {
      Opened o = opened.computeIfAbsent(nodeid, k -> new Opened());
      if (o.passthrough == 0 && o.cached == 0 && node.kind() == LayerTree.Kind.REG && passthrough) {
        Optional<Path> file = backing.find(node.content());
        if (file.isPresent()) {
          o.backingId = backingOpen(file.get());
        }
      }
      if (o.passthrough > 0 || o.backingId > 0 && o.cached == 0) {
        o.passthrough++;
        fh = FH_PASSTHROUGH;
        flags = FOPEN_PASSTHROUGH | FOPEN_NOFLUSH;
        backingId = o.backingId;
        passthroughOpens.incrementAndGet();
      } else {
        o.cached++;
      }
    }
    out.putLong(OUT_HEADER, fh);
    out.putInt(OUT_HEADER + 8, flags);
    out.putInt(OUT_HEADER + 12, backingId);
    return 16;
  }

  /**
   * Registers {@code file} with the kernel as a backing file; its id, or 0 when it cannot be (evicted meanwhile: this
   * open is cached; refused by the kernel: every later one is, said once).
   */
  private int backingOpen(Path file) {
    int bfd = libc.open(file.toString(), Libc.O_RDONLY | Libc.O_CLOEXEC);
    if (bfd < 0) {
      return 0;
    }
    try {
      ByteBuffer map = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder());
      map.putInt(0, bfd);
      int id = libc.ioctl(fd, Libc.FUSE_DEV_IOC_BACKING_OPEN, Pointer.wrap(Libc.Holder.RUNTIME, map));
      if (id <= 0) {
        int errno = Libc.Holder.errno();
        passthrough = false;
        LOG.log(System.Logger.Level.WARNING, mountPoint + ": the kernel refuses backing files (errno " + errno
            + (errno == Libc.EPERM ? ": no CAP_SYS_ADMIN in the initial user namespace" : errno == Libc.ELOOP
            ? ": the page cache's file system is itself stacked" : "") + "); its files are read through FUSE");
        return 0;
      }
      return id;
    } finally {
      // The kernel holds the file from here on; the descriptor is not needed.
      libc.close(bfd);
    }
  }

  private int release(long nodeid, long fh) {
    Optional<Node> n = node(nodeid);
    boolean offer = false;
    synchronized (opened) {
      Opened o = opened.get(nodeid);
      if (o == null) {
        return 0;
      }
      if (fh == FH_PASSTHROUGH && o.passthrough > 0) {
        if (--o.passthrough == 0) {
          ByteBuffer id = ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder()).putInt(0, o.backingId);
          libc.ioctl(fd, Libc.FUSE_DEV_IOC_BACKING_CLOSE, Pointer.wrap(Libc.Holder.RUNTIME, id));
          o.backingId = 0;
        }
      } else if (fh == FH_CACHED && o.cached > 0) {
        o.cached--;
        offer = true;
      }
      if (o.cached == 0 && o.passthrough == 0) {
        opened.remove(nodeid);
      }
    }
    if (offer && n.isPresent() && n.get().kind() == LayerTree.Kind.REG) {
      // A file read whole while it was open gets its backing file for its next open.
      backing.offer(n.get().content());
    }
    return 0;
  }

  private int getattr(long nodeid, ByteBuffer out) {
    Optional<Node> n = node(nodeid);
    if (n.isEmpty()) {
      return -Libc.ENOENT;
    }
    out.putLong(OUT_HEADER, VALID_SECONDS);
    out.putInt(OUT_HEADER + 8, 0);
    out.putInt(OUT_HEADER + 12, 0);
    attr(out, OUT_HEADER + 16, n.get());
    return 16 + ATTR;
  }

  private int readlink(long nodeid, ByteBuffer out) {
    Optional<Node> n = node(nodeid);
    if (n.isEmpty()) {
      return -Libc.ENOENT;
    }
    if (n.get().kind() != LayerTree.Kind.SYMLINK) {
      return -Libc.EINVAL;
    }
    byte[] target = n.get().symlinkTarget().getBytes(StandardCharsets.UTF_8);
    out.put(OUT_HEADER, target);
    return target.length;
  }

  private int read(long nodeid, long offset, int size, ByteBuffer out) throws IOException {
    Optional<Node> n = node(nodeid);
    if (n.isEmpty()) {
      return -Libc.ENOENT;
    }
    Node node = n.get();
    if (node.kind() != LayerTree.Kind.REG) {
      return -Libc.EISDIR;
    }
    if (offset >= node.size()) {
      return 0;
    }
    int length = (int) Math.min(Math.min(size, MAX_READ), node.size() - offset);
    int got = reader.read(node.content(), offset, out, OUT_HEADER, length);
    events.readServed("/" + node.content().name(), offset, got);
    return got;
  }

  /**
   * Entries from {@code offset} (the index of the next one: 0 is ".", 1 "..", then the children in layer order) as
   * many as {@code size} bytes hold; each with its attributes for READDIRPLUS.
   */
  private int readdir(long nodeid, long offset, int size, boolean plus, ByteBuffer out) {
    Optional<Node> n = node(nodeid);
    if (n.isEmpty()) {
      return -Libc.ENOENT;
    }
    Node dir = n.get();
    if (dir.kind() != LayerTree.Kind.DIR) {
      return -Libc.ENOTDIR;
    }
    int limit = Math.min(size, MAX_READ);
    int[] used = {0};
    long[] index = {0};
    java.util.function.BiPredicate<String, Node> add = (name, child) -> {
      long i = index[0]++;
      if (i < offset) {
        return true;
      }
      byte[] bytes = name.getBytes(StandardCharsets.UTF_8);
      int dirent = (24 + bytes.length + 7) & ~7;
      int record = (plus ? ENTRY_OUT : 0) + dirent;
      if (used[0] + record > limit) {
        return false;
      }
      int at = OUT_HEADER + used[0];
      if (plus) {
        // "." and ".." carry no entry (node id 0): the kernel knows them.
        entry(out, at, name.equals(".") || name.equals("..") ? null : child);
        at += ENTRY_OUT;
      }
      out.putLong(at, child == null ? dir.ino() : child.ino());
      out.putLong(at + 8, i + 1);
      out.putInt(at + 16, bytes.length);
      out.putInt(at + 20, child == null ? 4 : (child.stMode() >>> 12) & 15);
      out.put(at + 24, bytes);
      for (int p = 24 + bytes.length; p < dirent; p++) {
        out.put(at + p, (byte) 0);
      }
      used[0] += record;
      return true;
    };
    if (add.test(".", null) && add.test("..", null)) {
      tree.forEachChild(dir, add);
    }
    return used[0];
  }

  private int getxattr(long nodeid, int size, String name, ByteBuffer out) {
    Optional<Node> n = node(nodeid);
    if (n.isEmpty()) {
      return -Libc.ENOENT;
    }
    byte[] v = n.get().xattrs().get(name);
    if (v == null) {
      return -Libc.ENODATA;
    }
    return sized(v, size, out);
  }

  private int listxattr(long nodeid, int size, ByteBuffer out) {
    Optional<Node> n = node(nodeid);
    if (n.isEmpty()) {
      return -Libc.ENOENT;
    }
    return sized(n.get().xattrNameList(), size, out);
  }

  /** An xattr answer: its length alone when asked with size 0, ERANGE when it does not fit. */
  private static int sized(byte[] value, int size, ByteBuffer out) {
    if (size == 0) {
      out.putInt(OUT_HEADER, value.length);
      out.putInt(OUT_HEADER + 4, 0);
      return 8;
    }
    if (size < value.length) {
      return -Libc.ERANGE;
    }
    out.put(OUT_HEADER, value);
    return value.length;
  }

  private int statfs(ByteBuffer out) {
    for (int i = 0; i < 80; i += 8) {
      out.putLong(OUT_HEADER + i, 0);
    }
    out.putLong(OUT_HEADER, (tree.totalBytes() + 4095) / 4096);
    out.putLong(OUT_HEADER + 24, tree.size());
    out.putInt(OUT_HEADER + 40, 4096);
    out.putInt(OUT_HEADER + 44, 255);
    out.putInt(OUT_HEADER + 48, 4096);
    return 80;
  }

  /** A {@code fuse_entry_out} at {@code at}: {@code n}'s, or a missing name's (node id 0) when null. */
  private static void entry(ByteBuffer out, int at, Node n) {
    out.putLong(at, n == null ? 0 : n.ino());
    out.putLong(at + 8, 0);
    out.putLong(at + 16, VALID_SECONDS);
    out.putLong(at + 24, VALID_SECONDS);
    out.putInt(at + 32, 0);
    out.putInt(at + 36, 0);
    if (n == null) {
      for (int i = 0; i < ATTR; i += 8) {
        out.putLong(at + 40 + i, 0);
      }
    } else {
      attr(out, at + 40, n);
    }
  }

  /** A {@code fuse_attr} at {@code at}. */
  private static void attr(ByteBuffer out, int at, Node n) {
    long sec = n.modTime().getEpochSecond();
    int nsec = n.modTime().getNano();
    out.putLong(at, n.ino());
    out.putLong(at + 8, n.size());
    out.putLong(at + 16, (n.size() + 511) / 512);
    out.putLong(at + 24, sec);
    out.putLong(at + 32, sec);
    out.putLong(at + 40, sec);
    out.putInt(at + 48, 0);
    out.putInt(at + 52, nsec);
    out.putInt(at + 56, 0);
    out.putInt(at + 60, n.stMode());
    out.putInt(at + 64, n.links());
    out.putInt(at + 68, n.uid());
    out.putInt(at + 72, n.gid());
    out.putInt(at + 76, (int) LayerFileSystem.makedev(n.devMajor(), n.devMinor()));
    out.putInt(at + 80, 4096);
    out.putInt(at + 84, 0);
  }

  /** The NUL-terminated name at {@code from}. */
  private static String cString(ByteBuffer in, int from, int length) {
    int end = from;
    while (end < length && in.get(end) != 0) {
      end++;
    }
    byte[] b = new byte[end - from];
    in.get(from, b);
    return new String(b, StandardCharsets.UTF_8);
  }

  private String pathOf(long nodeid) {
    return node(nodeid).flatMap(LayerTree.Node::path).map(p -> "/" + p).orElse("#" + nodeid);
  }

  private static String name(int opcode) {
    return switch (opcode) {
      case LOOKUP -> "lookup";
      case GETATTR -> "getattr";
      case READLINK -> "readlink";
      case READ -> "read";
      case READDIR -> "readdir";
      case READDIRPLUS -> "readdirplus";
      case GETXATTR -> "getxattr";
      case LISTXATTR -> "listxattr";
      case STATFS -> "statfs";
      case OPEN -> "open";
      case RELEASE -> "release";
      case INIT -> "init";
      default -> "opcode " + opcode;
    };
  }
}
