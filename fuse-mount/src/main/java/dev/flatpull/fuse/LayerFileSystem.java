package dev.flatpull.fuse;

import dev.flatpull.fuse.LayerTree.Node;
import java.nio.charset.StandardCharsets;
import java.util.Optional;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;
import ru.serce.jnrfuse.ErrorCodes;
import ru.serce.jnrfuse.FuseFillDir;
import ru.serce.jnrfuse.FuseStubFS;
import ru.serce.jnrfuse.struct.FileStat;
import ru.serce.jnrfuse.struct.FuseFileInfo;
import ru.serce.jnrfuse.struct.Statvfs;

/**
 * The read-only FUSE file system of one layer: the only class that speaks errno. Metadata comes from the
 * {@link LayerTree} (never the network); file contents from the {@link LayerContentReader}. Every callback catches
 * everything: a failed fetch or verification answers EIO, never wrong bytes, and is reported to {@link FuseEvents}.
 * jnr-fuse's stubs would otherwise answer "success" and let exceptions escape into native code.
 */
public final class LayerFileSystem extends FuseStubFS {
  private static final System.Logger LOG = System.getLogger(LayerFileSystem.class.getName());
  private static final int O_ACCMODE = 3;
  private static final jnr.ffi.Runtime RUNTIME = jnr.ffi.Runtime.getSystemRuntime();
  private static final int STAT_SIZE = jnr.ffi.Struct.size(new FileStat(RUNTIME));

  // Set once by bind, before the mount: the kernel calls in only after it.
  private volatile LayerTree tree;
  private volatile LayerContentReader reader;
  private volatile FuseEvents events = FuseEvents.NONE;
  private final java.util.concurrent.CompletableFuture<Void> initialized = new java.util.concurrent.CompletableFuture<>();

  public LayerFileSystem(LayerTree tree, LayerContentReader reader, FuseEvents events) {
    bind(tree, reader, events);
  }

  /**
   * A file system to {@link #bind} later. jnr-fuse's constructor (its libfuse binding, a table of some forty callback
   * closures, reflection over this class) took 10-35 ms, most on a process's first real mount: built ahead, it is not
   * on the path of the mount that takes it.
   */
  public LayerFileSystem() {}

  /** Gives an unbound file system its layer; once only, and before it is mounted. */
  public LayerFileSystem bind(LayerTree tree, LayerContentReader reader, FuseEvents events) {
    if (this.tree != null) {
      throw new IllegalStateException("this file system already serves a layer");
    }
    this.reader = reader;
    this.events = events;
    this.tree = tree;
    return this;
  }

  LayerTree tree() {
    return tree;
  }

  LayerContentReader reader() {
    return reader;
  }

  FuseEvents events() {
    return events;
  }

  /** Whether {@link #bind} has given it a layer. */
  boolean bound() {
    return tree != null;
  }

  /**
   * libfuse calls {@code init} once the kernel has sent FUSE_INIT for the new mount: from then on the mount serves.
   * {@link LayerMount} waits for it instead of a fixed delay.
   */
  @Override
  public Pointer init(Pointer conn) {
    initialized.complete(null);
    return null;
  }

  /** Completes when libfuse has initialised the mount (see {@link #init}). */
  java.util.concurrent.CompletableFuture<Void> initialized() {
    return initialized;
  }

  /** The table of callbacks libfuse calls, for {@link FuseSession}. */
  ru.serce.jnrfuse.struct.FuseOperations operations() {
    return fuseOperations;
  }

  /**
   * Tells jnr-fuse that this file system is mounted at {@code at} by {@link FuseSession}, so that its {@link #umount}
   * (which ends the session and detaches the mount) works as after its own mount.
   */
  void mountedAt(java.nio.file.Path at) {
    mountPoint = at;
    mounted.set(true);
  }

  @FunctionalInterface
  private interface Op {
    int run() throws Exception;
  }

  private int guard(String operation, String path, Op op) {
    try {
      return op.run();
    } catch (Throwable t) {
      int errno = -ErrorCodes.EIO();
      LOG.log(System.Logger.Level.WARNING, operation + " " + path + " failed: " + t);
      try {
        events.operationFailed(operation, path, errno, t);
      } catch (RuntimeException ignored) {
        // A listener must not turn an EIO into a crash.
      }
      return errno;
    }
  }

  private Optional<Node> node(String path) {
    return tree.lookup(path);
  }

  @Override
  public int getattr(String path, FileStat stat) {
    return guard("getattr", path, () -> {
      Optional<Node> n = node(path);
      if (n.isEmpty()) {
        return -ErrorCodes.ENOENT();
      }
      fill(n.get(), stat);
      return 0;
    });
  }

  static void fill(Node n, FileStat stat) {
    stat.st_mode.set(n.stMode());
    stat.st_ino.set(n.ino());
    stat.st_nlink.set(n.links());
    stat.st_uid.set(n.uid());
    stat.st_gid.set(n.gid());
    stat.st_size.set(n.size());
    stat.st_blocks.set((n.size() + 511) / 512);
    stat.st_blksize.set(4096);
    stat.st_rdev.set(makedev(n.devMajor(), n.devMinor()));
    long sec = n.modTime().getEpochSecond();
    stat.st_mtim.tv_sec.set(sec);
    stat.st_mtim.tv_nsec.set(n.modTime().getNano());
    stat.st_ctim.tv_sec.set(sec);
    stat.st_atim.tv_sec.set(sec);
  }

  /** glibc's makedev: 12 bits of major and 20 of minor, interleaved. */
  static long makedev(long major, long minor) {
    return ((major & 0xfffL) << 8) | (minor & 0xffL) | ((minor & ~0xffL) << 12) | ((major & ~0xfffL) << 32);
  }

  @Override
  public int readdir(String path, Pointer buf, FuseFillDir filler, long offset, FuseFileInfo fi) {
    return guard("readdir", path, () -> {
      Optional<Node> n = node(path);
      if (n.isEmpty()) {
        return -ErrorCodes.ENOENT();
      }
      if (n.get().kind() != LayerTree.Kind.DIR) {
        return -ErrorCodes.ENOTDIR();
      }
      filler.apply(buf, ".", null, 0);
      filler.apply(buf, "..", null, 0);
      // Each entry carries its type: overlayfs recognises whiteouts in a merged listing only by d_type DT_CHR.
      FileStat stat = FileStat.of(Memory.allocateDirect(RUNTIME, STAT_SIZE));
      String dir = path.endsWith("/") ? path : path + "/";
      for (String child : n.get().children()) {
        Optional<Node> c = node(dir + child);
        if (c.isEmpty()) {
          continue;
        }
        fill(c.get(), stat);
        if (filler.apply(buf, child, stat, 0) != 0) {
          break;
        }
      }
      return 0;
    });
  }

  @Override
  public int open(String path, FuseFileInfo fi) {
    return guard("open", path, () -> {
      Optional<Node> n = node(path);
      if (n.isEmpty()) {
        return -ErrorCodes.ENOENT();
      }
      if ((fi.flags.get() & O_ACCMODE) != 0) {
        return -ErrorCodes.EROFS();
      }
      if (n.get().kind() == LayerTree.Kind.DIR) {
        return -ErrorCodes.EISDIR();
      }
      return 0;
    });
  }

  @Override
  public int read(String path, Pointer buf, long size, long offset, FuseFileInfo fi) {
    return guard("read", path, () -> {
      Optional<Node> n = node(path);
      if (n.isEmpty()) {
        return -ErrorCodes.ENOENT();
      }
      Node node = n.get();
      if (node.kind() != LayerTree.Kind.REG) {
        return -ErrorCodes.EISDIR();
      }
      if (offset >= node.size()) {
        return 0;
      }
      byte[] bytes = new byte[(int) Math.min(size, node.size() - offset)];
      int got = reader.read(node.content(), offset, bytes, bytes.length);
      buf.put(0, bytes, 0, got);
      events.readServed(path, offset, got);
      return got;
    });
  }

  @Override
  public int readlink(String path, Pointer buf, long size) {
    return guard("readlink", path, () -> {
      Optional<Node> n = node(path);
      if (n.isEmpty()) {
        return -ErrorCodes.ENOENT();
      }
      if (n.get().kind() != LayerTree.Kind.SYMLINK) {
        return -ErrorCodes.EINVAL();
      }
      byte[] target = n.get().symlinkTarget().getBytes(StandardCharsets.UTF_8);
      int len = (int) Math.min(target.length, size - 1);
      buf.put(0, target, 0, len);
      buf.putByte(len, (byte) 0);
      return 0;
    });
  }

  @Override
  public int getxattr(String path, String name, Pointer value, long size) {
    return guard("getxattr", path, () -> {
      if (!tree.hasXattrs()) {
        return -ErrorCodes.ENOSYS(); // as the kernel engine: asked once, never again (LayerTree#hasXattrs)
      }
      Optional<Node> n = node(path);
      if (n.isEmpty()) {
        return -ErrorCodes.ENOENT();
      }
      byte[] v = n.get().xattrs().get(name);
      if (v == null) {
        return -ErrorCodes.ENODATA();
      }
      if (size == 0) {
        return v.length;
      }
      if (size < v.length) {
        return -ErrorCodes.ERANGE();
      }
      value.put(0, v, 0, v.length);
      return v.length;
    });
  }

  @Override
  public int listxattr(String path, Pointer list, long size) {
    return guard("listxattr", path, () -> {
      Optional<Node> n = node(path);
      if (n.isEmpty()) {
        return -ErrorCodes.ENOENT();
      }
      byte[] all = n.get().xattrNameList();
      if (size == 0) {
        return all.length;
      }
      if (size < all.length) {
        return -ErrorCodes.ERANGE();
      }
      list.put(0, all, 0, all.length);
      return all.length;
    });
  }

  @Override
  public int access(String path, int mask) {
    return guard("access", path, () -> node(path).isPresent() ? 0 : -ErrorCodes.ENOENT());
  }

  @Override
  public int statfs(String path, Statvfs stbuf) {
    return guard("statfs", path, () -> {
      stbuf.f_bsize.set(4096);
      stbuf.f_frsize.set(4096);
      stbuf.f_blocks.set((tree.totalBytes() + 4095) / 4096);
      stbuf.f_files.set(tree.size());
      stbuf.f_namemax.set(255);
      return 0;
    });
  }
}
