package dev.flatpull.fuse;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import jnr.ffi.Pointer;

/**
 * A unix socket between two processes that carries open FUSE devices with a message each ({@code SCM_RIGHTS}): a
 * process that does not restart with the FUSE manager holds each mount's device, so that the kernel keeps the mount's
 * connection (and queues its requests) while no manager serves, and hands it to the next manager. The descriptor the
 * receiver gets is the same open device, not a new one: the kernel's requests read and not yet answered belong to it,
 * and survive the sender. Sequenced packets keep each message whole. Java 17's unix sockets cannot pass descriptors,
 * so this goes through jnr-ffi. Not thread-safe.
 */
public final class DeviceHandover implements AutoCloseable {
  /** The largest message: a mount's identity and negotiation. */
  public static final int MAX_MESSAGE = 64 << 10;
  private static final int MSGHDR = 56;
  private static final int IOVEC = 16;
  // CMSG_SPACE(sizeof(int)) on LP64: a 16-byte header and the int, padded to 8.
  private static final int CMSG_SPACE = 24;
  private static final int CMSG_LEN = 20;
  private static final int SUN_PATH = 108;

  private final Libc libc = Libc.Holder.LIBC;
  private final int socket;
  private final Path listening;

  private DeviceHandover(int socket, Path listening) {
    this.socket = socket;
    this.listening = listening;
  }

  /** A message and the descriptor that came with it (-1: none). */
  public record Received(int descriptor, byte[] message) {}

  /**
   * What a FUSE manager and the holder of its devices say to each other, one message each. {@code HOLD} (with the
   * device): keep this mount's device, its negotiation and its source (what a manager needs to serve the layer again);
   * {@code DROP}: the mount is gone, close it; {@code TAKE}: give me this mount's device; {@code TAKE_ALL}: give me
   * every held mount's. The answers: {@code GIVEN} (with a duplicate of the device, its negotiation and source), one
   * per mount, and {@code NONE}, which ends them.
   */
  public record Message(Kind kind, Path mountPoint, byte[] negotiation, String source) {
    public enum Kind { HOLD, DROP, TAKE, TAKE_ALL, GIVEN, NONE }

    public Message {
      mountPoint = mountPoint.toAbsolutePath().normalize();
      negotiation = negotiation.clone();
      java.util.Objects.requireNonNull(source);
    }

    /** A message that carries a mount point alone. */
    public static Message of(Kind kind, Path mountPoint) {
      return new Message(kind, mountPoint, new byte[0], "");
    }

    public byte[] encode() {
      byte[] path = mountPoint.toString().getBytes(StandardCharsets.UTF_8);
      byte[] src = source.getBytes(StandardCharsets.UTF_8);
      return ByteBuffer.allocate(1 + 4 + path.length + 4 + negotiation.length + src.length)
          .put((byte) kind.ordinal()).putInt(path.length).put(path).putInt(negotiation.length).put(negotiation)
          .put(src).array();
    }

    /** The message {@code bytes} hold; anything else is refused. */
    public static Message decode(byte[] bytes) throws IOException {
      ByteBuffer b = ByteBuffer.wrap(bytes);
      if (bytes.length < 9 || bytes[0] < 0 || bytes[0] >= Kind.values().length) {
        throw new IOException("not a device holder's message (" + bytes.length + " bytes)");
      }
      Kind kind = Kind.values()[b.get()];
      byte[] path = field(b, bytes.length, "path");
      if (path.length == 0) {
        throw new IOException("a device holder's message without a mount point");
      }
      byte[] negotiation = field(b, bytes.length, "negotiation");
      byte[] source = new byte[b.remaining()];
      b.get(source);
      return new Message(kind, Path.of(new String(path, StandardCharsets.UTF_8)), negotiation,
          new String(source, StandardCharsets.UTF_8));
    }

    private static byte[] field(ByteBuffer b, int total, String what) throws IOException {
      int length = b.remaining() >= 4 ? b.getInt() : -1;
      if (length < 0 || length > b.remaining()) {
        throw new IOException("a device holder's message with a " + what + " of " + length + " bytes in " + total);
      }
      byte[] out = new byte[length];
      b.get(out);
      return out;
    }
  }

  /** Sends {@code message}, with a duplicate of {@code descriptor} unless it is -1. */
  public void send(Message message, int descriptor) throws IOException {
    send(descriptor, message.encode());
  }

  /** Listens at {@code path} (replacing a socket a killed process left there); {@link #accept} takes connections. */
  public static DeviceHandover listen(Path path) throws IOException {
    DeviceHandover h = new DeviceHandover(newSocket(), path);
    Libc.Holder.LIBC.unlink(path.toString());
    if (Libc.Holder.LIBC.bind(h.socket, address(path), 2 + SUN_PATH) != 0
        || Libc.Holder.LIBC.listen(h.socket, 16) != 0) {
      int errno = Libc.Holder.errno();
      h.close();
      throw new IOException("listening at " + path + " failed: errno " + errno);
    }
    return h;
  }

  /** Connects to the process listening at {@code path}. */
  public static DeviceHandover connect(Path path) throws IOException {
    DeviceHandover h = new DeviceHandover(newSocket(), null);
    if (Libc.Holder.LIBC.connect(h.socket, address(path), 2 + SUN_PATH) != 0) {
      int errno = Libc.Holder.errno();
      h.close();
      throw new IOException("connecting to " + path + " failed: errno " + errno);
    }
    return h;
  }

  /** Waits for the next connection to this listening socket. */
  public DeviceHandover accept() throws IOException {
    while (true) {
      int s = libc.accept4(socket, null, null, Libc.SOCK_CLOEXEC);
      if (s >= 0) {
        return new DeviceHandover(s, null);
      }
      int errno = Libc.Holder.errno();
      if (errno != Libc.EINTR) {
        throw new IOException("accepting at " + listening + " failed: errno " + errno);
      }
    }
  }

  /** Sends {@code message} (at least one byte), with a duplicate of {@code descriptor} unless it is -1. */
  public void send(int descriptor, byte[] message) throws IOException {
    if (message.length == 0 || message.length > MAX_MESSAGE) {
      throw new IllegalArgumentException("a message of " + message.length + " bytes");
    }
    ByteBuffer data = ByteBuffer.allocateDirect(message.length).put(message).flip();
    ByteBuffer control = ByteBuffer.allocateDirect(CMSG_SPACE).order(ByteOrder.nativeOrder());
    control.putLong(0, CMSG_LEN).putInt(8, Libc.SOL_SOCKET).putInt(12, Libc.SCM_RIGHTS).putInt(16, descriptor);
    ByteBuffer iov = ByteBuffer.allocateDirect(IOVEC);
    ByteBuffer msg = header(iov, data, message.length, descriptor >= 0 ? control : null);
    while (true) {
      long n = libc.sendmsg(socket, pointer(msg), Libc.MSG_NOSIGNAL);
      java.lang.ref.Reference.reachabilityFence(iov);
      java.lang.ref.Reference.reachabilityFence(data);
      java.lang.ref.Reference.reachabilityFence(control);
      if (n == message.length) {
        return;
      }
      int errno = Libc.Holder.errno();
      if (n >= 0 || errno != Libc.EINTR) {
        throw new IOException("sending a descriptor failed: " + (n >= 0 ? n + " of " + message.length + " bytes"
            : "errno " + errno));
      }
    }
  }

  /**
   * The next message and its descriptor (close-on-exec; the caller owns it); an empty message when the other side
   * closed the socket.
   */
  public Received receive() throws IOException {
    ByteBuffer data = ByteBuffer.allocateDirect(MAX_MESSAGE);
    ByteBuffer control = ByteBuffer.allocateDirect(CMSG_SPACE).order(ByteOrder.nativeOrder());
    ByteBuffer iov = ByteBuffer.allocateDirect(IOVEC);
    ByteBuffer msg = header(iov, data, MAX_MESSAGE, control);
    long n;
    while (true) {
      n = libc.recvmsg(socket, pointer(msg), Libc.MSG_CMSG_CLOEXEC);
      java.lang.ref.Reference.reachabilityFence(iov);
      if (n >= 0) {
        break;
      }
      int errno = Libc.Holder.errno();
      if (errno != Libc.EINTR) {
        throw new IOException("receiving a descriptor failed: errno " + errno);
      }
    }
    int descriptor = -1;
    if (msg.getLong(40) >= CMSG_LEN && control.getInt(8) == Libc.SOL_SOCKET
        && control.getInt(12) == Libc.SCM_RIGHTS) {
      descriptor = control.getInt(16);
    }
    byte[] message = new byte[(int) n];
    data.get(0, message);
    return new Received(descriptor, message);
  }

  /** Closes a descriptor this process was given and no longer passes on. */
  public static void closeDescriptor(int descriptor) {
    if (descriptor >= 0) {
      Libc.Holder.LIBC.close(descriptor);
    }
  }

  /**
   * Ends the connection both ways without closing the socket (its owner's thread may be blocked on it, and closes it
   * when that returns).
   */
  public void shutdown() {
    libc.shutdown(socket, Libc.SHUT_RDWR);
  }

  @Override
  public void close() {
    libc.shutdown(socket, Libc.SHUT_RDWR);
    libc.close(socket);
    if (listening != null) {
      libc.unlink(listening.toString());
    }
  }

  private static int newSocket() throws IOException {
    int s = Libc.Holder.LIBC.socket(Libc.AF_UNIX, Libc.SOCK_SEQPACKET | Libc.SOCK_CLOEXEC, 0);
    if (s < 0) {
      throw new IOException("a unix socket cannot be made: errno " + Libc.Holder.errno());
    }
    return s;
  }

  private static Pointer address(Path path) {
    byte[] name = path.toAbsolutePath().toString().getBytes(StandardCharsets.UTF_8);
    if (name.length >= SUN_PATH) {
      throw new IllegalArgumentException("a unix socket's path of " + name.length + " bytes: at most "
          + (SUN_PATH - 1));
    }
    ByteBuffer a = ByteBuffer.allocateDirect(2 + SUN_PATH).order(ByteOrder.nativeOrder());
    a.putShort(0, (short) Libc.AF_UNIX).put(2, name);
    return pointer(a);
  }

  /**
   * A {@code struct msghdr} (LP64 layout) of one {@code iovec}, {@code iov}, over {@code data}, and {@code control}.
   * The caller keeps the buffers reachable until the call that reads the header returns.
   */
  private static ByteBuffer header(ByteBuffer iov, ByteBuffer data, int length, ByteBuffer control) {
    iov.order(ByteOrder.nativeOrder()).putLong(0, pointer(data).address()).putLong(8, length);
    ByteBuffer msg = ByteBuffer.allocateDirect(MSGHDR + 8).order(ByteOrder.nativeOrder());
    msg.putLong(16, pointer(iov).address()).putLong(24, 1);
    if (control != null) {
      msg.putLong(32, pointer(control).address()).putLong(40, CMSG_SPACE);
    }
    return msg;
  }

  private static Pointer pointer(ByteBuffer direct) {
    return Pointer.wrap(Libc.Holder.RUNTIME, direct);
  }
}
