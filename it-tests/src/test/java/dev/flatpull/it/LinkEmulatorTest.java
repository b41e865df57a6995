package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * The link emulator adds at least its round trip per exchange and a handshake per connection, caps throughput at its
 * bandwidth, and logs the requests it carried. Bounds are one-sided (a loaded machine is only slower), so the test
 * cannot pass by a lucky fast run of an emulator that adds nothing.
 */
class LinkEmulatorTest {
  @Test
  void link_addsRoundTripsAndShapesBandwidth_andLogsRequests() throws Exception {
    byte[] body = new byte[1_000_000];
    try (ServerSocket upstream = new ServerSocket(0, 8, InetAddress.getLoopbackAddress())) {
      Thread server = new Thread(() -> {
        try (Socket s = upstream.accept(); InputStream in = s.getInputStream(); OutputStream out = s.getOutputStream()) {
          for (int i = 0; i < 2; i++) {
            readHead(in);
            out.write(("HTTP/1.1 200 OK\r\nContent-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            out.write(body);
            out.flush();
          }
        } catch (Exception ignored) {
          // The test ends the connection.
        }
      });
      server.setDaemon(true);
      server.start();
      try (LinkEmulator link = LinkEmulator.start("127.0.0.1:" + upstream.getLocalPort(),
          LinkEmulator.Link.parse("100ms/40mbit"))) {
        link.mark();
        String[] hostPort = link.address().split(":");
        long t0 = System.nanoTime();
        try (Socket c = new Socket(hostPort[0], Integer.parseInt(hostPort[1]))) {
          OutputStream out = c.getOutputStream();
          InputStream in = c.getInputStream();
          for (int i = 0; i < 2; i++) {
            out.write(("GET /v2/app/blobs/sha256:abc HTTP/1.1\r\nHost: x\r\nRange: bytes=0-" + i + "\r\n\r\n")
                .getBytes(StandardCharsets.US_ASCII));
            out.flush();
            readHead(in);
            in.readNBytes(body.length);
          }
        }
        Duration took = Duration.ofNanos(System.nanoTime() - t0);
        // One handshake and two exchanges of 100 ms, and 2 MB at 5 MB/s: at least 0.3 s + 0.4 s.
        assertTrue(took.toMillis() >= 650, "took " + took);
        LinkEmulator.Counts counts = link.sinceMark();
        assertEquals(1, counts.connections());
        assertEquals(2, counts.requests().size(), counts.requests().toString());
        assertEquals("blob-range", counts.requests().get(0).kind());
        assertEquals("bytes=0-1", counts.requests().get(1).range());
        assertTrue(counts.bytesDown() >= 2 * body.length, "bytes down " + counts.bytesDown());
      }
    }
  }

  @Test
  void link_parse_refusesWhatIsNotRttSlashBandwidth() {
    assertEquals(Duration.ofMillis(2), LinkEmulator.Link.parse("2ms/10gbit").rtt());
    assertEquals(10_000_000_000L, LinkEmulator.Link.parse("2ms/10gbit").bitsPerSecond());
    assertEquals("20ms/200mbit", LinkEmulator.Link.parse("20ms/200mbit").toString());
    assertThrows(IllegalArgumentException.class, () -> LinkEmulator.Link.parse("fast"));
  }

  private static void readHead(InputStream in) throws Exception {
    int state = 0;
    while (state < 4) {
      int b = in.read();
      if (b < 0) {
        throw new java.io.EOFException();
      }
      state = (b == '\r' && (state == 0 || state == 2)) || (b == '\n' && (state == 1 || state == 3)) ? state + 1 : 0;
    }
  }
}
