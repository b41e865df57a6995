package dev.flatpull.fuse;

import dev.flatpull.core.DaemonThreads;
import dev.flatpull.fuse.DeviceHandover.Message;
import java.io.IOException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.function.Predicate;
import java.util.logging.Logger;

/**
 * The daemon's hold on every kernel-engine mount's open FUSE device, handed over by the FUSE manager
 * ({@link MountHandover}) after each mount: the kernel keeps a mount's connection while any process holds its device,
 * so a manager that dies (or is replaced) leaves the containers' reads waiting, not failing, until the next manager
 * takes the mount over ({@code take_over} of the manager's Mount) and the kernel resends what the dead one had read.
 * The daemon restarting loses its holds, not the mounts (the manager holds its devices too, and hands them all over
 * again to the next daemon). Thread-safe.
 */
public final class DeviceHolder implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(DeviceHolder.class.getName());

  private record Held(int device, byte[] negotiation, String source) {}

  /** Holds nothing: no manager's mount can be taken over. */
  public static final DeviceHolder NONE = new DeviceHolder(null, () -> {});

  private final DeviceHandover listening;
  private final Runnable connectionEnded;
  private final Map<Path, Held> held = new HashMap<>();
  // Managers' connections: closed with the holder, so that a manager sees it go as it would see the daemon die.
  private final java.util.Set<DeviceHandover> peers = new java.util.HashSet<>();
  private volatile boolean closed;

  private DeviceHolder(DeviceHandover listening, Runnable connectionEnded) {
    this.listening = listening;
    this.connectionEnded = connectionEnded;
  }

  /** Holds what FUSE managers hand over at {@code socket} (replacing a socket a killed daemon left). */
  public static DeviceHolder listen(Path socket) throws IOException {
    return listen(socket, () -> {});
  }

  /**
   * Like {@link #listen(Path)}, and runs {@code connectionEnded} (on the connection's thread) each time a manager's
   * connection ends while the holder is open: the kernel closes it the moment the manager dies, killed or not, where
   * a process that is not the watcher's child is only polled for (the JDK's {@code onExit} sleeps 300 ms, then 30 ms
   * longer at each poll, up to 5 s).
   */
  public static DeviceHolder listen(Path socket, Runnable connectionEnded) throws IOException {
    DeviceHolder h = new DeviceHolder(DeviceHandover.listen(socket), connectionEnded);
    DaemonThreads.named("flatpull-device-holder").newThread(h::accept).start();
    return h;
  }

  private void accept() {
    while (!closed) {
      DeviceHandover peer;
      try {
        peer = listening.accept();
      } catch (IOException e) {
        if (!closed) {
          LOG.warning("the FUSE device holder stops accepting: " + e.getMessage());
        }
        return;
      }
      DaemonThreads.named("flatpull-device-holder-peer").newThread(() -> serve(peer)).start();
    }
  }

  private void serve(DeviceHandover peer) {
    synchronized (peers) {
      if (closed) {
        peer.close();
        return;
      }
      peers.add(peer);
    }
    try {
      while (!closed) {
        DeviceHandover.Received r = peer.receive();
        if (r.message().length == 0) {
          return; // the manager closed its end (it exited, or was killed)
        }
        Message m;
        try {
          m = Message.decode(r.message());
        } catch (IOException e) {
          DeviceHandover.closeDescriptor(r.descriptor());
          LOG.warning("a FUSE manager's message refused: " + e.getMessage());
          return;
        }
        switch (m.kind()) {
          case HOLD -> hold(m, r.descriptor());
          case DROP -> drop(m.mountPoint());
          case TAKE -> give(peer, m.mountPoint());
          case TAKE_ALL -> giveAll(peer);
          case GIVEN, NONE -> {
            DeviceHandover.closeDescriptor(r.descriptor());
            LOG.warning("a FUSE manager sent the holder's own answer " + m.kind() + "; ignored");
          }
        }
      }
    } catch (IOException e) {
      if (!closed) {
        LOG.fine(() -> "a FUSE manager's connection to the device holder ended: " + e.getMessage());
      }
    } finally {
      // Out of the set before its descriptor is closed: a shutdown must never reach a descriptor reused since.
      synchronized (peers) {
        peers.remove(peer);
        peer.close();
      }
      if (!closed) {
        connectionEnded.run();
      }
    }
  }

  private synchronized void hold(Message m, int device) {
    if (device < 0) {
      LOG.warning("a FUSE manager asked to hold " + m.mountPoint() + " without its device; ignored");
      return;
    }
    if (closed) {
      DeviceHandover.closeDescriptor(device);
      return;
    }
    Held old = held.put(m.mountPoint(), new Held(device, m.negotiation(), m.source()));
    if (old != null) {
      DeviceHandover.closeDescriptor(old.device());
    }
  }

  private synchronized void give(DeviceHandover peer, Path mountPoint) throws IOException {
    Held h = held.get(mountPoint);
    if (h == null) {
      peer.send(Message.of(Message.Kind.NONE, mountPoint), -1);
    } else {
      peer.send(new Message(Message.Kind.GIVEN, mountPoint, h.negotiation(), h.source()), h.device());
    }
  }

  private synchronized void giveAll(DeviceHandover peer) throws IOException {
    for (Map.Entry<Path, Held> e : held.entrySet()) {
      Held h = e.getValue();
      peer.send(new Message(Message.Kind.GIVEN, e.getKey(), h.negotiation(), h.source()), h.device());
    }
    peer.send(Message.of(Message.Kind.NONE, Path.of("/")), -1);
  }

  /** Managers connected now (tests). */
  int peerCount() {
    synchronized (peers) {
      return peers.size();
    }
  }

  /** Whether the device of the mount at {@code mountPoint} is held: a manager can take the mount over. */
  public synchronized boolean holds(Path mountPoint) {
    return held.containsKey(mountPoint.toAbsolutePath().normalize());
  }

  /**
   * Lets go of the mount's device: once no process holds it and nothing serves it, the kernel ends the connection
   * (a detached mount's readers then fail instead of waiting).
   */
  public synchronized void drop(Path mountPoint) {
    Held h = held.remove(mountPoint.toAbsolutePath().normalize());
    if (h != null) {
      DeviceHandover.closeDescriptor(h.device());
    }
  }

  /** Lets go of the devices of mount points that are no longer mounted (detached by a removal, say). */
  public synchronized void dropUnless(Predicate<Path> mounted) {
    for (Path p : Map.copyOf(held).keySet()) {
      if (!mounted.test(p)) {
        drop(p);
      }
    }
  }

  /** Mount points whose devices are held. */
  public synchronized java.util.Set<Path> held() {
    return java.util.Set.copyOf(held.keySet());
  }

  @Override
  public synchronized void close() {
    closed = true;
    if (listening != null) {
      listening.close();
    }
    synchronized (peers) {
      for (DeviceHandover p : peers) {
        p.shutdown();
      }
    }
    for (Held h : held.values()) {
      DeviceHandover.closeDescriptor(h.device());
    }
    held.clear();
  }
}
