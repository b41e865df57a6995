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
 * A layer's file system as libfuse 2's high-level API calls it, through jnr-fuse: the libfuse engine's half of the
 * errno speaking (the kernel engine's is {@link KernelSession}). Metadata comes from the layer's {@link LayerTree}
 * (never the network); file contents from its {@link LayerContentReader}. Every callback catches everything: a failed
 * fetch or verification answers EIO, never wrong bytes, and is reported to {@link FuseEvents}. jnr-fuse's stubs would
 * otherwise answer "success" and let exceptions escape into native code.
 *
 * <p>Made only for a libfuse mount ({@link LayerFileSystem#libfuse}): jnr-fuse's constructor binds libfuse anew,
 * generating a class with native stubs, and builds some forty callback closures, all of which jnr-ffi frees from
 * finalizers once the instance is collected and its class unloaded (docs/development.md).
 */
public final class LibfuseFileSystem extends FuseStubFS {
  private static final System.Logger LOG = System.getLogger(LibfuseFileSystem.class.getName());
  private static final int O_ACCMODE = 3;
  private static final jnr.ffi.Runtime RUNTIME = jnr.ffi.Runtime.getSystemRuntime();
  private static final int STAT_SIZE = jnr.ffi.Struct.size(new FileStat(RUNTIME));

  // The layer, read at each callback: it is bound before the mount, the adapter may be built before that.
  private final LayerFileSystem layer;
  private final java.util.concurrent.CompletableFuture<Void> initialized = new java.util.concurrent.CompletableFuture<>();

  LibfuseFileSystem(LayerFileSystem layer) {
    this.layer = layer;
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
        layer.events().operationFailed(operation, path, errno, t);
      } catch (RuntimeException ignored) {
        // A listener must not turn an EIO into a crash.
      }
      return errno;
    }
  }

  private Optional<Node> node(String path) {
    return layer.tree().lookup(path);
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
    stat.st_rdev.set(LayerFileSystem.makedev(n.devMajor(), n.devMinor()));
    long sec = n.modTime().getEpochSecond();
    stat.st_mtim.tv_sec.set(sec);
    stat.st_mtim.tv_nsec.set(n.modTime().getNano());
    stat.st_ctim.tv_sec.set(sec);
    stat.st_atim.tv_sec.set(sec);
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
      int got = layer.reader().read(node.content(), offset, bytes, bytes.length);
      buf.put(0, bytes, 0, got);
      layer.events().readServed(path, offset, got);
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
      if (!layer.tree().hasXattrs()) {
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
      stbuf.f_blocks.set((layer.tree().totalBytes() + 4095) / 4096);
      stbuf.f_files.set(layer.tree().size());
      stbuf.f_namemax.set(255);
      return 0;
    });
  }
}
