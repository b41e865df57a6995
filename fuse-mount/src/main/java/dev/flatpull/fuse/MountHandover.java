package dev.flatpull.fuse;

import dev.flatpull.core.DaemonThreads;
import dev.flatpull.fuse.DeviceHandover.Message;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import java.util.function.Supplier;
import java.util.logging.Logger;

/**
 * The manager's side of the daemon's device holder ({@link DeviceHolder}): every kernel-engine mount's FUSE device is
 * handed to it once mounted, and dropped when unmounted, so that the mounts outlive this process; a manager that
 * starts after one that died takes a mount's device back ({@link #take}). One connection carries the holds and is
 * kept: when the daemon restarts it is made again and every served mount handed over anew. Without a daemon
 * listening (a manager of the warm-up, {@code flatpull mount}) nothing is handed over. Thread-safe.
 */
public final class MountHandover implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(MountHandover.class.getName());
  private static final long RETRY_MILLIS = 1000;

  /** Hands nothing over. */
  public static final MountHandover NONE = new MountHandover(null, Map::of);

  /** A served mount as it is handed over: its connection, and its source (what serves its layer again). */
  public record Handed(LayerMount.Connection connection, String source) {}

  private final Path socket;
  private final Supplier<Map<Path, Handed>> served;
  // The connection the holds go on. Only the thread that made it closes it; others end it (shutdown), which wakes
  // that thread: two closes of one descriptor number could close another file opened meanwhile.
  private DeviceHandover connection;
  private volatile boolean closed;

  /** @param served the mounts served now, handed over again on every new connection */
  MountHandover(Path socket, Supplier<Map<Path, Handed>> served) {
    this.socket = socket;
    this.served = served;
  }

  /** Starts keeping the connection to the holder at {@code socket}. */
  public static MountHandover start(Path socket, Supplier<Map<Path, Handed>> served) {
    MountHandover h = new MountHandover(socket, served);
    DaemonThreads.named("flatpull-mount-handover").newThread(h::keep).start();
    return h;
  }

  private void keep() {
    boolean said = false;
    while (!closed) {
      DeviceHandover c;
      try {
        c = DeviceHandover.connect(socket);
      } catch (IOException | IllegalArgumentException e) {
        if (!said) {
          LOG.info("no FUSE device holder at " + socket + " yet (" + e.getMessage() + "); mounts are handed over"
              + " once the daemon listens");
          said = true;
        }
        sleep();
        continue;
      }
      synchronized (this) {
        connection = c;
        served.get().forEach(this::holdLocked);
      }
      LOG.info("handing mounts' FUSE devices to the daemon at " + socket);
      said = false;
      try {
        // The holder never writes here: the read returns when the daemon goes away.
        c.receive();
      } catch (IOException e) {
        // gone all the same
      }
      synchronized (this) {
        if (connection == c) {
          connection = null;
        }
      }
      c.close();
      sleep();
    }
  }

  private void sleep() {
    try {
      Thread.sleep(RETRY_MILLIS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      closed = true;
    }
  }

  /** Hands the mount at {@code mountPoint} over to the daemon (again, if it held it already). */
  public synchronized void hold(Path mountPoint, Handed h) {
    holdLocked(mountPoint, h);
  }

  private void holdLocked(Path mountPoint, Handed h) {
    send(new Message(Message.Kind.HOLD, mountPoint, h.connection().negotiation(), h.source()),
        h.connection().device());
  }

  /** Tells the daemon the mount at {@code mountPoint} is gone. */
  public synchronized void drop(Path mountPoint) {
    send(Message.of(Message.Kind.DROP, mountPoint), -1);
  }

  private void send(Message m, int device) {
    if (connection == null) {
      return; // handed over with every other mount once connected
    }
    try {
      connection.send(m, device);
    } catch (IOException e) {
      LOG.warning("handing " + m.mountPoint() + " to the daemon failed (" + e.getMessage() + "); again once"
          + " reconnected");
      connection.shutdown();
      connection = null;
    }
  }

  /**
   * A device taken back from the holder, with the mount it serves, its negotiation and its source: this process owns
   * {@code device} and must serve or close it.
   */
  public record Taken(Path mountPoint, int device, byte[] negotiation, String source) {}

  /** The device of the mount at {@code mountPoint}, if the daemon holds it. */
  public Optional<Taken> take(Path mountPoint) throws IOException {
    if (socket == null) {
      return Optional.empty();
    }
    try (DeviceHandover c = DeviceHandover.connect(socket)) {
      c.send(Message.of(Message.Kind.TAKE, mountPoint), -1);
      return answer(c);
    }
  }

  /**
   * Every mount whose device the daemon holds (a manager starting after one that died takes them all over at once);
   * empty when no daemon listens.
   */
  public java.util.List<Taken> takeAll() throws IOException {
    java.util.List<Taken> out = new java.util.ArrayList<>();
    if (socket == null) {
      return out;
    }
    DeviceHandover c;
    try {
      c = DeviceHandover.connect(socket);
    } catch (IOException noDaemon) {
      return out;
    }
    try (c) {
      c.send(Message.of(Message.Kind.TAKE_ALL, Path.of("/")), -1);
      for (Optional<Taken> t = answer(c); t.isPresent(); t = answer(c)) {
        out.add(t.get());
      }
    } catch (IOException | RuntimeException e) {
      out.forEach(t -> DeviceHandover.closeDescriptor(t.device()));
      throw e;
    }
    return out;
  }

  /** The holder's next answer: a device given, or empty for NONE. */
  private static Optional<Taken> answer(DeviceHandover c) throws IOException {
    DeviceHandover.Received r = c.receive();
    if (r.message().length == 0) {
      throw new IOException("the FUSE device holder closed the connection without an answer");
    }
    Message m = Message.decode(r.message());
    if (m.kind() != Message.Kind.GIVEN || r.descriptor() < 0) {
      DeviceHandover.closeDescriptor(r.descriptor());
      return Optional.empty();
    }
    return Optional.of(new Taken(m.mountPoint(), r.descriptor(), m.negotiation(), m.source()));
  }

  @Override
  public synchronized void close() {
    closed = true;
    if (connection != null) {
      connection.shutdown();
      connection = null;
    }
  }
}
