package dev.flatpull.fuse;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Await;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import jnr.ffi.Pointer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The daemon's holder and the manager's handover over a real unix socket, with an open file standing for a FUSE
 * device: held, taken back as the same open file, dropped, handed over again to a holder that restarted, and a
 * malformed message refused without losing what is held.
 */
class DeviceHolderTest {
  private static final Duration WAIT = Duration.ofSeconds(30);
  @TempDir Path dir;

  @Test
  void aMountHandedOver_isTakenBackAsTheSameOpenDevice_andDroppedWithItsMount() throws Exception {
    Path socket = dir.resolve("devices.sock");
    Path mount = dir.resolve("mnt");
    int device = openWithOffset(4);
    byte[] negotiation = {1, 2, 3};
    Map<Path, MountHandover.Handed> served = new ConcurrentHashMap<>();
    try (DeviceHolder holder = DeviceHolder.listen(socket);
        MountHandover handover = MountHandover.start(socket, () -> Map.copyOf(served))) {
      // As a manager mounts: served first, then handed over; whether or not the connection is made yet, it is held.
      MountHandover.Handed handed = new MountHandover.Handed(new LayerMount.Connection(device, negotiation), "ref\n{}");
      served.put(mount, handed);
      handover.hold(mount, handed);
      Await.until(WAIT, () -> holder.holds(mount), () -> "the mount handed over");
      Optional<MountHandover.Taken> taken = handover.take(mount);
      assertTrue(taken.isPresent());
      assertArrayEquals(negotiation, taken.get().negotiation());
      assertEquals("ref\n{}", taken.get().source());
      // The same open file: it reads on from where this process's descriptor left it.
      assertEquals("456789", read(taken.get().device()));
      DeviceHandover.closeDescriptor(taken.get().device());
      assertTrue(handover.take(dir.resolve("other")).isEmpty(), "no device for a mount never handed over");

      handover.drop(mount);
      Await.until(WAIT, () -> !holder.holds(mount), () -> "the mount dropped");
      assertTrue(handover.take(mount).isEmpty());
    } finally {
      Libc.Holder.LIBC.close(device);
    }
  }

  @Test
  void aHolderThatRestarts_isHandedEveryServedMountAgain() throws Exception {
    Path socket = dir.resolve("devices.sock");
    Path mount = dir.resolve("mnt");
    int device = openWithOffset(0);
    Map<Path, MountHandover.Handed> served = Map.of(mount,
        new MountHandover.Handed(new LayerMount.Connection(device, new byte[] {9}), "source"));
    try (MountHandover handover = MountHandover.start(socket, () -> served)) {
      try (DeviceHolder first = DeviceHolder.listen(socket)) {
        Await.until(WAIT, () -> first.holds(mount), () -> "held by the first holder");
      }
      try (DeviceHolder second = DeviceHolder.listen(socket)) {
        Await.until(WAIT, () -> second.holds(mount), () -> "held again by the holder started after it");
        assertEquals(java.util.Set.of(mount.toAbsolutePath().normalize()), second.held());
        // A manager starting after one that died takes every held mount at once, each with its source.
        java.util.List<MountHandover.Taken> all = handover.takeAll();
        assertEquals(1, all.size());
        assertEquals(mount.toAbsolutePath().normalize(), all.get(0).mountPoint());
        assertEquals("source", all.get(0).source());
        assertArrayEquals(new byte[] {9}, all.get(0).negotiation());
        DeviceHandover.closeDescriptor(all.get(0).device());
      }
    } finally {
      Libc.Holder.LIBC.close(device);
    }
  }

  @Test
  void aMalformedMessage_endsItsConnection_andWhatIsHeldStays() throws Exception {
    Path socket = dir.resolve("devices.sock");
    Path mount = dir.resolve("mnt");
    int device = openWithOffset(0);
    try (DeviceHolder holder = DeviceHolder.listen(socket)) {
      try (DeviceHandover c = DeviceHandover.connect(socket)) {
        c.send(new DeviceHandover.Message(DeviceHandover.Message.Kind.HOLD, mount, new byte[] {1}, "s"), device);
        Await.until(WAIT, () -> holder.holds(mount), () -> "held");
        c.send(-1, "not a message".getBytes(StandardCharsets.UTF_8));
        // The holder closes the connection: the next receive sees its end.
        assertEquals(0, c.receive().message().length);
      }
      assertTrue(holder.holds(mount));
      holder.dropUnless(p -> false);
      assertFalse(holder.holds(mount));
    } finally {
      Libc.Holder.LIBC.close(device);
    }
  }

  @Test
  void aManagersConnectionThatEnds_isReportedAtOnce_butNotTheHoldersOwnClose() throws Exception {
    Path socket = dir.resolve("devices.sock");
    java.util.concurrent.atomic.AtomicInteger ended = new java.util.concurrent.atomic.AtomicInteger();
    int device = openWithOffset(0);
    try (DeviceHolder holder = DeviceHolder.listen(socket, ended::incrementAndGet)) {
      // A manager's connection, ended as its process's death ends it: the kernel closes the descriptor.
      try (DeviceHandover c = DeviceHandover.connect(socket)) {
        c.send(new DeviceHandover.Message(DeviceHandover.Message.Kind.HOLD, dir.resolve("mnt"), new byte[] {1}, "s"),
            device);
        Await.until(WAIT, () -> holder.holds(dir.resolve("mnt")), () -> "held");
        assertEquals(0, ended.get(), "nothing ended while the manager is connected");
      }
      Await.until(WAIT, () -> ended.get() == 1, () -> "the end of the manager's connection reported");
      assertTrue(holder.holds(dir.resolve("mnt")), "what it handed over is still held for its successor");
      DeviceHandover second = DeviceHandover.connect(socket);
      Await.until(WAIT, () -> holder.peerCount() == 1, () -> "a second manager connected");
      holder.close();
      second.close();
    } finally {
      Libc.Holder.LIBC.close(device);
    }
    Thread.sleep(200);
    assertEquals(1, ended.get(), "the holder's own close is no manager's end");
  }

  /** A file of "0123456789" opened and read {@code skip} bytes into. */
  private int openWithOffset(int skip) throws Exception {
    Path file = Files.writeString(dir.resolve("device-" + skip + "-" + System.nanoTime()), "0123456789");
    int fd = Libc.Holder.LIBC.open(file.toString(), Libc.O_RDONLY | Libc.O_CLOEXEC);
    assertTrue(fd >= 0);
    if (skip > 0) {
      assertEquals(skip, readUpTo(fd, skip).length());
    }
    return fd;
  }

  private static String read(int fd) {
    return readUpTo(fd, 100);
  }

  private static String readUpTo(int fd, int max) {
    ByteBuffer b = ByteBuffer.allocateDirect(max);
    long n = Libc.Holder.LIBC.read(fd, Pointer.wrap(Libc.Holder.RUNTIME, b), max);
    byte[] out = new byte[(int) Math.max(0, n)];
    b.get(0, out);
    return new String(out, StandardCharsets.UTF_8);
  }
}
