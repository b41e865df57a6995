package dev.flatpull.trace.probe;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import org.junit.jupiter.api.Test;

class ReadinessTest {
  /** A container whose exit status and output the test sets. */
  static final class FakeContainer implements ContainerView {
    volatile OptionalInt exit = OptionalInt.empty();
    final List<String> lines = new ArrayList<>();

    @Override
    public OptionalInt exitStatus() {
      return exit;
    }

    @Override
    public synchronized List<String> outputLines() {
      return List.copyOf(lines);
    }
  }

  private static final Duration ATTEMPT = Duration.ofSeconds(1);

  @Test
  void specsParse_andBadSpecsSayWhatIsExpected() {
    assertInstanceOf(Probe.Exit.class, Probe.parse("exit"));
    assertInstanceOf(Probe.Http.class, Probe.parse("http://127.0.0.1:8080/health"));
    assertInstanceOf(Probe.Tcp.class, Probe.parse("tcp://localhost:5432"));
    assertInstanceOf(Probe.Exec.class, Probe.parse("exec:test -e /tmp"));
    assertInstanceOf(Probe.Log.class, Probe.parse("log:Listening on \\d+"));
    for (String bad : List.of("ready", "http://nohost", "tcp://host", "tcp://host:99999", "log:(", "exec:")) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Probe.parse(bad));
      assertTrue(e.getMessage().contains(bad), e.getMessage());
    }
  }

  @Test
  void eachKindOfProbe_passesOnlyWhenItsConditionHolds() throws Exception {
    FakeContainer c = new FakeContainer();
    HttpServer http = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    http.createContext("/ok", x -> {
      x.sendResponseHeaders(204, -1);
      x.close();
    });
    http.createContext("/down", x -> {
      x.sendResponseHeaders(503, -1);
      x.close();
    });
    http.start();
    try (ServerSocket tcp = new ServerSocket(0)) {
      int port = http.getAddress().getPort();
      assertTrue(Probe.parse("http://127.0.0.1:" + port + "/ok").check(c, ATTEMPT));
      assertFalse(Probe.parse("http://127.0.0.1:" + port + "/down").check(c, ATTEMPT));
      assertTrue(Probe.parse("tcp://127.0.0.1:" + tcp.getLocalPort()).check(c, ATTEMPT));
      assertTrue(Probe.parse("exec:true").check(c, ATTEMPT));
      assertFalse(Probe.parse("exec:exit 3").check(c, ATTEMPT));
      assertFalse(Probe.parse("log:ready on \\d+").check(c, ATTEMPT));
      c.lines.add("server ready on 8080");
      assertTrue(Probe.parse("log:ready on \\d+").check(c, ATTEMPT));
      assertFalse(Probe.parse("exit").check(c, ATTEMPT));
      c.exit = OptionalInt.of(0);
      assertTrue(Probe.parse("exit").check(c, ATTEMPT));
    } finally {
      http.stop(0);
    }
    int closed;
    try (ServerSocket s = new ServerSocket(0)) {
      closed = s.getLocalPort();
    }
    assertFalse(Probe.parse("tcp://127.0.0.1:" + closed).check(c, ATTEMPT));
  }

  @Test
  void readyWhenEveryProbeHasPassed() throws Exception {
    FakeContainer c = new FakeContainer();
    Thread later = new Thread(() -> {
      try {
        Thread.sleep(300);
      } catch (InterruptedException e) {
        return;
      }
      synchronized (c) {
        c.lines.add("started");
      }
    });
    later.start();
    Duration d = Readiness.await(List.of(Probe.parse("exec:true"), Probe.parse("log:started")), c,
        Duration.ofMillis(20), Duration.ofSeconds(10));
    assertTrue(d.toMillis() >= 250, d.toString());
  }

  @Test
  void aTimeout_andAContainerThatExitsFirst_areNotReady() {
    FakeContainer c = new FakeContainer();
    NotReadyException t = assertThrows(NotReadyException.class, () -> Readiness.await(List.of(Probe.parse("exec:false")),
        c, Duration.ofMillis(50), Duration.ofMillis(300)));
    assertTrue(t.getMessage().contains("timed out") && t.getMessage().contains("exec:false"), t.getMessage());
    assertTrue(t.getMessage().endsWith("it wrote nothing to stdout or stderr"), t.getMessage());
    c.exit = OptionalInt.of(2);
    for (int i = 1; i <= 12; i++) {
      c.lines.add("line " + i);
    }
    c.lines.add("FATAL: data directory has wrong ownership");
    NotReadyException e = assertThrows(NotReadyException.class, () -> Readiness.await(List.of(Probe.parse("exit")),
        c, Duration.ofMillis(50), Duration.ofSeconds(5)));
    assertTrue(e.getMessage().contains("exited with status 2"), e.getMessage());
    // Why it failed is in what it wrote last: the last ten lines, not the first.
    assertTrue(e.getMessage().contains("the last 10 of its 13 lines:\n  line 4\n"), e.getMessage());
    assertTrue(e.getMessage().endsWith("\n  FATAL: data directory has wrong ownership"), e.getMessage());
    assertFalse(e.getMessage().contains("line 3\n"), e.getMessage());
  }
}
