package dev.flatpull.fuse;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import jnr.ffi.Pointer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Descriptors and messages through a real unix socket: the descriptor received is the same open file. */
class DeviceHandoverTest {
  @TempDir Path dir;

  @Test
  void aDescriptorArrivesWithItsMessage_asTheSameOpenFile() throws Exception {
    Path file = dir.resolve("content");
    Files.writeString(file, "0123456789");
    Libc libc = Libc.Holder.LIBC;
    int fd = libc.open(file.toString(), Libc.O_RDONLY | Libc.O_CLOEXEC);
    assertTrue(fd >= 0);
    // Read 4 bytes here: the receiver's descriptor shares the file offset, as only the same open file does.
    assertEquals(4, read(fd, 4).length());
    try (DeviceHandover server = DeviceHandover.listen(dir.resolve("s"))) {
      CompletableFuture<DeviceHandover.Received[]> got = CompletableFuture.supplyAsync(() -> {
        try (DeviceHandover peer = server.accept()) {
          return new DeviceHandover.Received[] {peer.receive(), peer.receive(), peer.receive()};
        } catch (IOException e) {
          throw new java.io.UncheckedIOException(e);
        }
      });
      try (DeviceHandover client = DeviceHandover.connect(dir.resolve("s"))) {
        client.send(fd, "layer one".getBytes(StandardCharsets.UTF_8));
        client.send(-1, new byte[] {7});
      }
      DeviceHandover.Received[] r = got.get(30, TimeUnit.SECONDS);
      assertArrayEquals("layer one".getBytes(StandardCharsets.UTF_8), r[0].message());
      assertTrue(r[0].descriptor() >= 0 && r[0].descriptor() != fd, "a descriptor of its own: " + r[0]);
      assertEquals("456789", read(r[0].descriptor(), 100));
      assertEquals(-1, r[1].descriptor());
      assertArrayEquals(new byte[] {7}, r[1].message());
      assertEquals(0, r[2].message().length, "the sender closed the socket");
      DeviceHandover.closeDescriptor(r[0].descriptor());
    } finally {
      libc.close(fd);
    }
    assertTrue(Files.notExists(dir.resolve("s")), "the listening socket's file is removed on close");
  }

  @Test
  void connectingWhereNothingListens_saysWhere() {
    IOException e = assertThrows(IOException.class, () -> DeviceHandover.connect(dir.resolve("none")));
    assertTrue(e.getMessage().contains("none"), e.getMessage());
  }

  private static String read(int fd, int max) {
    ByteBuffer b = ByteBuffer.allocateDirect(max);
    long n = Libc.Holder.LIBC.read(fd, Pointer.wrap(Libc.Holder.RUNTIME, b), max);
    byte[] out = new byte[(int) n];
    b.get(0, out);
    return new String(out, StandardCharsets.UTF_8);
  }
}
