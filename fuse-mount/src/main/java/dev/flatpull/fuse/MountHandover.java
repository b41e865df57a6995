package dev.flatpull.fuse;

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

  private final Path socket;
  private final Supplier<Map<Path, LayerMount.Connection>> served;
  private DeviceHandover connection;
  private volatile boolean closed;

  /** @param served the connections of the mounts served now, handed over again on every new connection */
  MountHandover(Path socket, Supplier<Map<Path, LayerMount.Connection>> served) {
    this.socket = socket;
    this.served = served;
  }

  /** Starts keeping the connection to the holder at {@code socket}. */
  public static MountHandover start(Path socket, Supplier<Map<Path, LayerMount.Connection>> served) {
    MountHandover h = new MountHandover(socket, served);
    Thread t = new Thread(h::keep, "flatpull-mount-handover");
    t.setDaemon(true);
    t.start();
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
  public synchronized void hold(Path mountPoint, LayerMount.Connection c) {
    holdLocked(mountPoint, c);
  }

  private void holdLocked(Path mountPoint, LayerMount.Connection c) {
    send(new Message(Message.Kind.HOLD, mountPoint, c.negotiation()), c.device());
  }

  /** Tells the daemon the mount at {@code mountPoint} is gone. */
  public synchronized void drop(Path mountPoint) {
    send(new Message(Message.Kind.DROP, mountPoint, new byte[0]), -1);
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
      connection.close();
      connection = null;
    }
  }

  /** A device taken back from the holder: this process owns {@code device} and must serve or close it. */
  public record Taken(int device, byte[] negotiation) {}

  /** The device of the mount at {@code mountPoint}, if the daemon holds it. */
  public Optional<Taken> take(Path mountPoint) throws IOException {
    if (socket == null) {
      return Optional.empty();
    }
    try (DeviceHandover c = DeviceHandover.connect(socket)) {
      c.send(new Message(Message.Kind.TAKE, mountPoint, new byte[0]), -1);
      DeviceHandover.Received r = c.receive();
      if (r.message().length == 0) {
        throw new IOException("the FUSE device holder closed the connection without an answer");
      }
      Message m = Message.decode(r.message());
      if (m.kind() != Message.Kind.GIVEN || r.descriptor() < 0) {
        DeviceHandover.closeDescriptor(r.descriptor());
        return Optional.empty();
      }
      return Optional.of(new Taken(r.descriptor(), m.negotiation()));
    }
  }

  @Override
  public synchronized void close() {
    closed = true;
    if (connection != null) {
      connection.close();
      connection = null;
    }
  }
}
