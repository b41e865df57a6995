package dev.flatpull.it;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A registry link on loopback: a TCP proxy in front of a registry that adds a round-trip time and a bandwidth (one
 * token bucket per direction, shared by all connections; a new connection pays one round trip for its handshake), and
 * counts connections, bytes and HTTP requests (method, path, {@code Range}), with a log of every request. Linux
 * {@code tc} here has no {@code netem}, hence user space. Requests are parsed from the client's stream (request line,
 * headers, a {@code Content-Length} body); chunked request bodies are not parsed (pulls send none). Thread-safe.
 */
public final class LinkEmulator implements AutoCloseable {
  private static final int CHUNK = 16 * 1024;

  /**
   * Round-trip time and bandwidth, e.g. {@code 20ms/200mbit}, {@code 2ms/10gbit}.
   *
   * @param bitsPerSecond in each direction
   */
  public record Link(Duration rtt, long bitsPerSecond) {
    private static final Pattern FORM = Pattern.compile("(\\d+)ms/(\\d+)(k|m|g)bit");

    public static Link parse(String text) {
      Matcher m = FORM.matcher(text.trim().toLowerCase(Locale.ROOT));
      if (!m.matches()) {
        throw new IllegalArgumentException("link '" + text + "' is not RTTms/Nmbit, e.g. 20ms/200mbit, 2ms/10gbit");
      }
      long unit = switch (m.group(3)) {
        case "k" -> 1_000L;
        case "m" -> 1_000_000L;
        default -> 1_000_000_000L;
      };
      return new Link(Duration.ofMillis(Long.parseLong(m.group(1))), Long.parseLong(m.group(2)) * unit);
    }

    @Override
    public String toString() {
      long b = bitsPerSecond;
      String rate = b % 1_000_000_000L == 0 ? b / 1_000_000_000L + "gbit" : b % 1_000_000 == 0 ? b / 1_000_000
          + "mbit" : b / 1000 + "kbit";
      return rtt.toMillis() + "ms/" + rate;
    }
  }

  /** One HTTP request as the registry received it; {@code userAgent} tells flatpull's requests from containerd's. */
  public record Request(long atMillis, String method, String path, String range, String userAgent) {
    /** Whether flatpull (not containerd) sent it. */
    public boolean byFlatpull() {
      return userAgent.startsWith("flatpull/");
    }

    /** The bytes its Range header asks for; 0 without one. */
    public long rangeLength() {
      java.util.regex.Matcher m = java.util.regex.Pattern.compile("bytes=(\\d+)-(\\d+)").matcher(range);
      return m.matches() ? Long.parseLong(m.group(2)) - Long.parseLong(m.group(1)) + 1 : 0;
    }

    /** manifest, blob, blob-range, referrers, token or other: a bounded set for tables. */
    public String kind() {
      if (path.contains("/referrers/")) {
        return "referrers";
      }
      if (path.contains("/manifests/")) {
        return "manifest";
      }
      if (path.contains("/blobs/")) {
        return range.isEmpty() ? "blob" : "blob-range";
      }
      return path.startsWith("/v2/") && path.length() <= 4 ? "ping" : "other";
    }
  }

  /** Counters since {@link #mark()}. */
  public record Counts(long connections, long bytesDown, long bytesUp, List<Request> requests) {}

  private final ServerSocket server;
  private final InetSocketAddress upstream;
  private final ExecutorService threads = Executors.newCachedThreadPool(
      dev.flatpull.core.DaemonThreads.named("link-emulator"));
  private volatile Link link;
  private final TokenBucket down = new TokenBucket();
  private final TokenBucket up = new TokenBucket();
  private final AtomicLong connections = new AtomicLong();
  private final AtomicLong bytesDown = new AtomicLong();
  private final AtomicLong bytesUp = new AtomicLong();
  private final List<Request> log = new ArrayList<>();
  private final long started = System.nanoTime();
  private long markConnections;
  private long markDown;
  private long markUp;
  private int markRequests;

  private LinkEmulator(ServerSocket server, InetSocketAddress upstream, Link link) {
    this.server = server;
    this.upstream = upstream;
    setLink(link);
  }

  /** A link to {@code upstream} ({@code HOST:PORT}) on a free port of 127.0.0.1. */
  public static LinkEmulator start(String upstream, Link link) throws IOException {
    int colon = upstream.lastIndexOf(':');
    ServerSocket s = new ServerSocket(0, 128, InetAddress.getLoopbackAddress());
    LinkEmulator e = new LinkEmulator(s, new InetSocketAddress(upstream.substring(0, colon),
        Integer.parseInt(upstream.substring(colon + 1))), link);
    e.threads.execute(e::accept);
    return e;
  }

  /** {@code 127.0.0.1:PORT}, the registry part of image references through this link. */
  public String address() {
    return "127.0.0.1:" + server.getLocalPort();
  }

  public void setLink(Link l) {
    this.link = l;
    down.rate(l.bitsPerSecond() / 8.0);
    up.rate(l.bitsPerSecond() / 8.0);
  }

  public Link link() {
    return link;
  }

  /** Starts counting afresh (the log is kept). */
  public synchronized void mark() {
    markConnections = connections.get();
    markDown = bytesDown.get();
    markUp = bytesUp.get();
    markRequests = log.size();
  }

  /** What crossed the link since the last {@link #mark()}. */
  public synchronized Counts sinceMark() {
    return new Counts(connections.get() - markConnections, bytesDown.get() - markDown, bytesUp.get() - markUp,
        List.copyOf(log.subList(markRequests, log.size())));
  }

  private synchronized void logged(Request r) {
    log.add(r);
  }

  private volatile java.util.function.Predicate<Request> held = r -> false;
  private final java.util.concurrent.atomic.AtomicReference<java.util.concurrent.CountDownLatch> release =
      new java.util.concurrent.atomic.AtomicReference<>(new java.util.concurrent.CountDownLatch(0));

  /**
   * Holds back every request {@code which} selects (and so its response) until {@link #releaseHeld}: the registry
   * sees it only then. Requests on other connections go on.
   */
  public void hold(java.util.function.Predicate<Request> which) {
    release.set(new java.util.concurrent.CountDownLatch(1));
    held = which;
  }

  /** Lets held requests through, and holds no more. */
  public void releaseHeld() {
    held = r -> false;
    release.get().countDown();
  }

  private volatile java.util.function.Predicate<Request> cut = r -> false;
  private volatile long cutAfter;

  /**
   * Breaks the connection of every request {@code which} selects after {@code bytes} of its response: a registry
   * that fails mid-stream.
   */
  public void cut(java.util.function.Predicate<Request> which, long bytes) {
    cutAfter = bytes;
    cut = which;
  }

  /** Cuts no more. */
  public void stopCutting() {
    cut = r -> false;
  }

  /** Whether a request {@code which} selects has been seen (and is held, if it is). */
  public synchronized boolean seen(java.util.function.Predicate<Request> which) {
    return log.stream().anyMatch(which);
  }

  private void accept() {
    while (!server.isClosed()) {
      try {
        Socket client = server.accept();
        connections.incrementAndGet();
        threads.execute(() -> connect(client));
      } catch (IOException e) {
        return;
      }
    }
  }

  private void connect(Socket client) {
    try {
      // The handshake: one round trip before the client's first byte reaches the registry.
      sleepNanos(link.rtt().toNanos());
      Socket server = new Socket();
      server.connect(upstream, 10_000);
      client.setTcpNoDelay(true);
      server.setTcpNoDelay(true);
      AtomicLong budget = new AtomicLong(-1);
      pump(client, server, up, bytesUp, true, budget);
      pump(server, client, down, bytesDown, false, budget);
    } catch (IOException e) {
      closeQuietly(client);
    }
  }

  /** One direction: a reader that stamps each chunk with its arrival, a writer that delays and shapes it. */
  /**
   * @param budget response bytes left before the connection is cut (-1: never); set by the request direction when a
   *     request to cut is seen, spent by the response direction
   */
  private void pump(Socket from, Socket to, TokenBucket bucket, AtomicLong counter, boolean requests,
      AtomicLong budget) {
    record Packet(byte[] bytes, int length, long releaseNanos) {}
    BlockingQueue<Packet> line = new LinkedBlockingQueue<>();
    RequestParser parser = requests ? new RequestParser(budget) : null;
    threads.execute(() -> {
      byte[] buf = new byte[CHUNK];
      try (InputStream in = from.getInputStream()) {
        int n;
        while ((n = in.read(buf)) > 0) {
          if (parser != null && parser.feed(buf, n)) {
            release.get().await();
          }
          line.put(new Packet(java.util.Arrays.copyOf(buf, n), n, System.nanoTime() + link.rtt().toNanos() / 2));
        }
      } catch (IOException | InterruptedException e) {
        // The connection ended.
      }
      line.add(new Packet(null, -1, 0));
    });
    threads.execute(() -> {
      try (OutputStream out = to.getOutputStream()) {
        while (true) {
          Packet p = line.take();
          if (p.length() < 0) {
            break;
          }
          sleepNanos(p.releaseNanos() - System.nanoTime());
          int n = p.length();
          long left = requests ? -1 : budget.get();
          if (left >= 0 && n >= left) {
            counter.addAndGet(left);
            out.write(p.bytes(), 0, (int) left);
            out.flush();
            break;
          }
          if (left >= 0) {
            budget.addAndGet(-n);
          }
          bucket.take(n);
          // Counted before the write: a reader that has the bytes must find them counted.
          counter.addAndGet(n);
          out.write(p.bytes(), 0, n);
          out.flush();
        }
      } catch (IOException | InterruptedException e) {
        // The other side went away.
      } finally {
        closeQuietly(to);
        closeQuietly(from);
      }
    });
  }

  /** Splits the client's byte stream into requests. */
  private final class RequestParser {
    private final StringBuilder head = new StringBuilder();
    private final AtomicLong budget;
    private long bodyLeft;

    RequestParser(AtomicLong budget) {
      this.budget = budget;
    }

    /** Returns whether a request to hold back began in these bytes. */
    boolean feed(byte[] buf, int n) {
      boolean hold = false;
      for (int i = 0; i < n; i++) {
        if (bodyLeft > 0) {
          long skip = Math.min(bodyLeft, n - i);
          bodyLeft -= skip;
          i += (int) skip - 1;
          continue;
        }
        head.append((char) (buf[i] & 0xff));
        int len = head.length();
        if (len >= 4 && head.charAt(len - 1) == '\n' && head.charAt(len - 2) == '\r' && head.charAt(len - 3) == '\n'
            && head.charAt(len - 4) == '\r') {
          hold |= request(head.toString());
          head.setLength(0);
        } else if (len > 64 * 1024) {
          head.setLength(0);
        }
      }
      return hold;
    }

    private boolean request(String text) {
      String[] lines = text.split("\r\n");
      String[] first = lines[0].split(" ");
      String range = "";
      String agent = "";
      for (String l : lines) {
        String lower = l.toLowerCase(Locale.ROOT);
        if (lower.startsWith("range:")) {
          range = l.substring(6).trim();
        } else if (lower.startsWith("user-agent:")) {
          agent = l.substring(11).trim();
        } else if (lower.startsWith("content-length:")) {
          try {
            bodyLeft = Long.parseLong(l.substring(15).trim());
          } catch (NumberFormatException ignored) {
            bodyLeft = 0;
          }
        }
      }
      if (first.length >= 2) {
        Request r = new Request((System.nanoTime() - started) / 1_000_000, first[0], first[1], range, agent);
        logged(r);
        if (cut.test(r)) {
          budget.set(cutAfter);
        }
        return held.test(r);
      }
      return false;
    }
  }

  /** Bytes per second with a small burst, shared by every connection of one direction. */
  private static final class TokenBucket {
    private double rate;
    private double tokens;
    private long last = System.nanoTime();

    synchronized void rate(double bytesPerSecond) {
      rate = bytesPerSecond;
      tokens = 0;
      last = System.nanoTime();
    }

    void take(int n) throws InterruptedException {
      long wait;
      synchronized (this) {
        long now = System.nanoTime();
        double burst = Math.max(CHUNK, rate / 1000); // a millisecond's worth
        tokens = Math.min(burst, tokens + (now - last) / 1e9 * rate);
        last = now;
        tokens -= n;
        wait = tokens >= 0 ? 0 : (long) (-tokens / rate * 1e9);
      }
      sleepNanos(wait);
    }
  }

  private static void sleepNanos(long nanos) {
    if (nanos <= 0) {
      return;
    }
    try {
      Thread.sleep(nanos / 1_000_000, (int) (nanos % 1_000_000));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static void closeQuietly(Socket s) {
    try {
      s.close();
    } catch (IOException ignored) {
      // Closing anyway.
    }
  }

  /** The request log as text lines: milliseconds since start, method, path, range. */
  public synchronized String logText() {
    StringBuilder b = new StringBuilder();
    for (Request r : log) {
      b.append(r.atMillis()).append(' ').append(r.method()).append(' ').append(r.path())
          .append(r.range().isEmpty() ? "" : " " + r.range()).append('\n');
    }
    return b.toString();
  }

  @Override
  public void close() throws IOException {
    server.close();
    threads.shutdownNow();
  }

  public static String describe(Counts c) {
    return String.format(Locale.ROOT, "%d requests, %d connections, %.1f MB down", c.requests().size(),
        c.connections(), c.bytesDown() / 1e6);
  }
}
