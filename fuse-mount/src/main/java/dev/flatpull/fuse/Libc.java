package dev.flatpull.fuse;

import jnr.ffi.LibraryLoader;
import jnr.ffi.Pointer;
import jnr.ffi.types.size_t;
import jnr.ffi.types.ssize_t;

/**
 * The system calls the kernel engine makes: the FUSE device is opened, mounted and served with them. Java 17 has no
 * foreign-function API and its {@code FileChannel} serialises reads and writes of one descriptor behind a lock (a
 * worker blocked reading the device would keep every other from answering), so they go through jnr-ffi, which
 * jnr-fuse already brings. Public only because jnr-ffi's generated class, in a loader of its own, implements it.
 */
public interface Libc {
  int O_RDONLY = 0;
  int O_RDWR = 2;
  int O_CLOEXEC = 0x80000;
  long MS_RDONLY = 1;
  long MS_NOSUID = 2;
  long MS_NODEV = 4;
  int MNT_DETACH = 2;

  int EPERM = 1;
  int ENOENT = 2;
  int EINTR = 4;
  int EIO = 5;
  int EAGAIN = 11;
  int ENODEV = 19;
  int ENOTDIR = 20;
  int EISDIR = 21;
  int EINVAL = 22;
  int EROFS = 30;
  int ERANGE = 34;
  int ENOSYS = 38;
  int ENODATA = 61;
  int EOPNOTSUPP = 95;
  int ELOOP = 40;

  /** {@code FUSE_DEV_IOC_BACKING_OPEN}: {@code _IOW(229, 1, struct fuse_backing_map)} (16 bytes). */
  long FUSE_DEV_IOC_BACKING_OPEN = 0x4010e501L;
  /** {@code FUSE_DEV_IOC_BACKING_CLOSE}: {@code _IOW(229, 2, uint32_t)}. */
  long FUSE_DEV_IOC_BACKING_CLOSE = 0x4004e502L;

  int open(String path, int flags);

  int close(int fd);

  @ssize_t long read(int fd, Pointer buf, @size_t long count);

  @ssize_t long write(int fd, Pointer buf, @size_t long count);

  int mount(String source, String target, String fstype, long flags, String data);

  int umount2(String target, int flags);

  /** The FUSE device's ioctls: {@code arg} points at their argument. */
  int ioctl(int fd, long request, Pointer arg);

  int getuid();

  // Unix sockets that carry open descriptors (DeviceHandover): Java's own unix sockets cannot pass one.
  int AF_UNIX = 1;
  int SOCK_SEQPACKET = 5;
  int SOCK_CLOEXEC = 0x80000;
  int SOL_SOCKET = 1;
  int SCM_RIGHTS = 1;
  int MSG_CMSG_CLOEXEC = 0x40000000;
  int MSG_NOSIGNAL = 0x4000;

  int socket(int domain, int type, int protocol);

  int bind(int fd, Pointer address, int length);

  int listen(int fd, int backlog);

  int accept4(int fd, Pointer address, Pointer length, int flags);

  int connect(int fd, Pointer address, int length);

  @ssize_t long sendmsg(int fd, Pointer message, int flags);

  @ssize_t long recvmsg(int fd, Pointer message, int flags);

  int unlink(String path);

  int SHUT_RDWR = 2;

  /** Wakes a thread blocked accepting on {@code fd}, which {@code close} alone does not. */
  int shutdown(int fd, int how);

  int getgid();

  /** {@code setpriority}'s {@code which} for one thread (Linux: a process id names a thread here). */
  int PRIO_PROCESS = 0;

  /** Sets the nice value of thread {@code who} (0: the caller); -1 and errno on failure. */
  int setpriority(int which, int who, int prio);

  /** The calling thread's id in the kernel's terms (glibc 2.30 on). */
  int gettid();

  /**
   * Binds libc now rather than at the first call: jnr-ffi generates the binding at run time (about a quarter of a
   * second on an idle machine, and no class-data archive holds it), which a process can do on a thread of its own
   * while it starts.
   */
  static void bindNow() {
    Holder.LIBC.getgid();
  }

  /** Loaded once, on first use. */
  final class Holder {
    static final Libc LIBC = LibraryLoader.create(Libc.class).failImmediately().load("c");
    static final jnr.ffi.Runtime RUNTIME = jnr.ffi.Runtime.getRuntime(LIBC);

    private Holder() {}

    /** The errno of the calling thread's last call through {@link #LIBC}. */
    static int errno() {
      return RUNTIME.getLastError();
    }
  }
}
