package dev.flatpull.it;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Predicate;

/**
 * A registry that misbehaves: an HTTP/1.1 proxy in front of a real registry that injects, per request and at a
 * configured rate (seeded), the faults registries and the networks in front of them show: a connection reset, a
 * truncated body, flipped bytes, 500 and 503, 429 with {@code Retry-After}, a response that stalls half-way, and a
 * {@code 200} that ignores {@code Range}. It can also be down (connections refused, open ones dropped) for a while.
 * Each request is forwarded on its own upstream connection and its response read whole before the fault is applied;
 * client connections are kept alive unless a fault ends them. Counts every fault it injected. Thread-safe.
 */
public final class FaultProxy implements AutoCloseable {
  private static final int FLIP_EVERY = 256;
  /** What can go wrong with one response. */
  public enum Fault {
    RESET,
    TRUNCATE,
    FLIP,
    STATUS_500,
    STATUS_503,
    TOO_MANY_REQUESTS,
    STALL,
    IGNORE_RANGE
  }

  /** Which requests get faults, how often, and which faults (one drawn uniformly per faulty request). */
  public record Plan(double rate, Set<Fault> faults, Predicate<LinkEmulator.Request> applies) {
    public static final Plan NONE = new Plan(0, EnumSet.noneOf(Fault.class), r -> false);
  }

  private final InetSocketAddress upstream;
  private final int port;
  private final Duration stall;
  private final Random random;
  private final ExecutorService threads = Executors.newCachedThreadPool(
      dev.flatpull.core.DaemonThreads.named("fault-proxy"));
  private final Set<Socket> open = ConcurrentHashMap.newKeySet();
  private final Map<Fault, AtomicLong> injected = new EnumMap<>(Fault.class);
  private final AtomicLong requests = new AtomicLong();
  private volatile Plan plan = Plan.NONE;
  private volatile ServerSocket server;

  private FaultProxy(InetSocketAddress upstream, ServerSocket server, long seed, Duration stall) {
    this.upstream = upstream;
    this.server = server;
    this.port = server.getLocalPort();
    this.random = new Random(seed);
    this.stall = stall;
    for (Fault f : Fault.values()) {
      injected.put(f, new AtomicLong());
    }
  }

  /**
   * A proxy to {@code upstream} ({@code HOST:PORT}) on a free port of 127.0.0.1; faults drawn from {@code seed}; a
   * stalled response hangs for {@code stall} (longer than the client's read timeout) before its connection closes.
   */
  public static FaultProxy start(String upstream, long seed, Duration stall) throws IOException {
    int colon = upstream.lastIndexOf(':');
    FaultProxy p = new FaultProxy(new InetSocketAddress(upstream.substring(0, colon),
        Integer.parseInt(upstream.substring(colon + 1))), listen(0), seed, stall);
    p.threads.execute(() -> p.accept(p.server));
    return p;
  }

  private static ServerSocket listen(int port) throws IOException {
    ServerSocket s = new ServerSocket();
    s.setReuseAddress(true);
    s.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 128);
    return s;
  }

  /** {@code 127.0.0.1:PORT}, the registry part of image references through this proxy. */
  public String address() {
    return "127.0.0.1:" + port;
  }

  public void setPlan(Plan p) {
    plan = p;
  }

  /** Faults injected so far, by kind. */
  public Map<Fault, Long> injected() {
    Map<Fault, Long> m = new EnumMap<>(Fault.class);
    injected.forEach((k, v) -> m.put(k, v.get()));
    return m;
  }

  public long injectedTotal() {
    return injected.values().stream().mapToLong(AtomicLong::get).sum();
  }

  /** Requests seen so far. */
  public long requests() {
    return requests.get();
  }

  /** The registry goes away: new connections are refused and open ones dropped, until {@link #up}. */
  public synchronized void down() throws IOException {
    server.close();
    for (Socket s : open) {
      reset(s);
    }
  }

  /** The registry is back, on the same port. */
  public synchronized void up() throws IOException {
    ServerSocket s = listen(port);
    server = s;
    threads.execute(() -> accept(s));
  }

  private void accept(ServerSocket s) {
    while (!s.isClosed()) {
      try {
        Socket client = s.accept();
        open.add(client);
        threads.execute(() -> serve(client));
      } catch (IOException e) {
        return;
      }
    }
  }

  private void serve(Socket client) {
    try (client) {
      InputStream in = new BufferedInputStream(client.getInputStream());
      OutputStream out = client.getOutputStream();
      while (true) {
        String head = readHead(in);
        if (head == null) {
          return;
        }
        List<String> lines = new ArrayList<>(List.of(head.split("\r\n")));
        String[] first = lines.get(0).split(" ");
        String range = header(lines, "range");
        String agent = header(lines, "user-agent");
        long length = Long.parseLong(header(lines, "content-length").isEmpty() ? "0" : header(lines, "content-length"));
        byte[] body = in.readNBytes((int) length);
        requests.incrementAndGet();
        LinkEmulator.Request r = new LinkEmulator.Request(0, first[0], first.length > 1 ? first[1] : "", range, agent);
        Fault fault = draw(r);
        if (fault != null) {
          injected.get(fault).incrementAndGet();
        }
        if (fault == Fault.STATUS_500 || fault == Fault.STATUS_503 || fault == Fault.TOO_MANY_REQUESTS) {
          String status = fault == Fault.STATUS_500 ? "500 Internal Server Error" : fault == Fault.STATUS_503
              ? "503 Service Unavailable" : "429 Too Many Requests";
          byte[] msg = "{\"errors\":[{\"code\":\"UNAVAILABLE\",\"message\":\"injected\"}]}".getBytes(StandardCharsets.UTF_8);
          out.write(("HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\nContent-Length: " + msg.length
              + (fault == Fault.TOO_MANY_REQUESTS ? "\r\nRetry-After: 1" : "") + "\r\n\r\n")
              .getBytes(StandardCharsets.ISO_8859_1));
          out.write(msg);
          out.flush();
          continue;
        }
        if (fault == Fault.RESET) {
          reset(client);
          return;
        }
        byte[][] response = forward(lines, body, fault == Fault.IGNORE_RANGE, first[0].equals("HEAD"));
        byte[] respHead = response[0];
        byte[] respBody = response[1];
        if (fault == Fault.FLIP && respBody.length > 0) {
          // A byte in every 256: every chunk of the response is garbled, not one of them. Chunks verify one by one,
          // and an intact chunk of a garbled response is served, so a single flip would spoil one chunk by chance.
          respBody = respBody.clone();
          for (int block = 0; block < respBody.length; block += FLIP_EVERY) {
            respBody[block + random(Math.min(FLIP_EVERY, respBody.length - block))] ^= (byte) 0x5a;
          }
        }
        out.write(respHead);
        if (fault == Fault.TRUNCATE && respBody.length > 0) {
          out.write(respBody, 0, respBody.length / 2);
          out.flush();
          return;
        }
        if (fault == Fault.STALL) {
          out.write(respBody, 0, respBody.length / 2);
          out.flush();
          Thread.sleep(stall.toMillis());
          return;
        }
        out.write(respBody);
        out.flush();
      }
    } catch (IOException | RuntimeException e) {
      // The client went away, or the registry did.
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      open.remove(client);
    }
  }

  private Fault draw(LinkEmulator.Request r) {
    Plan p = plan;
    if (p.faults().isEmpty() || !p.applies().test(r)) {
      return null;
    }
    synchronized (random) {
      if (random.nextDouble() >= p.rate()) {
        return null;
      }
      List<Fault> choices = new ArrayList<>(p.faults());
      Fault f = choices.get(random.nextInt(choices.size()));
      // Without a Range there is nothing to ignore: a plain response.
      return f == Fault.IGNORE_RANGE && r.range().isEmpty() ? null : f;
    }
  }

  private int random(int bound) {
    synchronized (random) {
      return random.nextInt(bound);
    }
  }

  /** Sends the request upstream on a fresh connection; returns the response's head (as sent on) and body. */
  private byte[][] forward(List<String> lines, byte[] body, boolean dropRange, boolean head) throws IOException {
    try (Socket up = new Socket()) {
      up.connect(upstream, 10_000);
      StringBuilder req = new StringBuilder(lines.get(0)).append("\r\n");
      for (String l : lines.subList(1, lines.size())) {
        String lower = l.toLowerCase(Locale.ROOT);
        if (lower.startsWith("connection:") || (dropRange && lower.startsWith("range:"))) {
          continue;
        }
        req.append(l).append("\r\n");
      }
      req.append("Connection: close\r\n\r\n");
      OutputStream o = up.getOutputStream();
      o.write(req.toString().getBytes(StandardCharsets.ISO_8859_1));
      o.write(body);
      o.flush();
      InputStream in = new BufferedInputStream(up.getInputStream());
      String respHead = readHead(in);
      if (respHead == null) {
        throw new IOException("no response from the registry");
      }
      List<String> rl = List.of(respHead.split("\r\n"));
      String cl = header(rl, "content-length");
      byte[] respBody = head || rl.get(0).contains(" 204 ") || rl.get(0).contains(" 304 ") ? new byte[0]
          : cl.isEmpty() ? in.readAllBytes() : in.readNBytes(Integer.parseInt(cl));
      StringBuilder h = new StringBuilder(rl.get(0)).append("\r\n");
      for (String l : rl.subList(1, rl.size())) {
        String lower = l.toLowerCase(Locale.ROOT);
        if (lower.startsWith("connection:") || lower.startsWith("transfer-encoding:")
            || (!head && lower.startsWith("content-length:"))) {
          continue;
        }
        h.append(l).append("\r\n");
      }
      if (!head) {
        h.append("Content-Length: ").append(respBody.length).append("\r\n");
      }
      h.append("\r\n");
      return new byte[][] {h.toString().getBytes(StandardCharsets.ISO_8859_1), respBody};
    }
  }

  /** The head of a message up to its blank line, or null at the end of the stream. */
  private static String readHead(InputStream in) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    int state = 0;
    while (true) {
      int c = in.read();
      if (c < 0) {
        return null;
      }
      b.write(c);
      state = (c == '\r' && (state == 0 || state == 2)) ? state + 1 : (c == '\n' && (state == 1 || state == 3))
          ? state + 1 : 0;
      if (state == 4) {
        String s = b.toString(StandardCharsets.ISO_8859_1);
        return s.substring(0, s.length() - 4);
      }
      if (b.size() > 64 * 1024) {
        throw new IOException("message head over 64 KiB");
      }
    }
  }

  private static String header(List<String> lines, String name) {
    for (String l : lines.subList(1, lines.size())) {
      int colon = l.indexOf(':');
      if (colon > 0 && l.substring(0, colon).trim().toLowerCase(Locale.ROOT).equals(name)) {
        return l.substring(colon + 1).trim();
      }
    }
    return "";
  }

  private static void reset(Socket s) {
    try {
      s.setSoLinger(true, 0); // RST, not FIN
      s.close();
    } catch (IOException ignored) {
      // Gone already.
    }
  }

  /** The counts as one line, for test output. */
  public String describe() {
    StringBuilder b = new StringBuilder(requests() + " requests, " + injectedTotal() + " faults (");
    injected().forEach((k, v) -> b.append(k.name().toLowerCase(Locale.ROOT)).append(' ').append(v).append(", "));
    b.setLength(b.length() - 2);
    return b.append(')').toString();
  }

  @Override
  public void close() throws IOException {
    server.close();
    for (Socket s : open) {
      reset(s);
    }
    threads.shutdownNow();
  }
}
