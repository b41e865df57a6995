package dev.flatpull.snapshotter.warmup;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.flatpull.fetcher.registry.InMemoryRegistry;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * An {@link InMemoryRegistry} served on 127.0.0.1 by the JDK's HTTP server, for {@link WarmUp}, which drives the
 * real registry client through it: nothing a real registry would be trusted for.
 */
public final class LoopbackRegistry implements AutoCloseable {
  private final HttpServer server;
  private final ExecutorService threads;
  private final InMemoryRegistry content = new InMemoryRegistry();

  private LoopbackRegistry(HttpServer server, ExecutorService threads) {
    this.server = server;
    this.threads = threads;
  }

  public static LoopbackRegistry start() throws IOException {
    HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 16);
    ExecutorService threads = Executors.newFixedThreadPool(4,
        dev.flatpull.core.DaemonThreads.named("flatpull-warm-up-registry"));
    s.setExecutor(threads);
    LoopbackRegistry r = new LoopbackRegistry(s, threads);
    s.createContext("/v2", r::handle);
    s.start();
    return r;
  }

  /** {@code 127.0.0.1:PORT}, the registry part of a reference. */
  public String address() {
    return "127.0.0.1:" + server.getAddress().getPort();
  }

  /** What it serves. */
  public InMemoryRegistry content() {
    return content;
  }

  private void handle(HttpExchange x) throws IOException {
    try (x) {
      String query = x.getRequestURI().getRawQuery();
      String digest = null;
      if (query != null) {
        for (String p : query.split("&")) {
          if (p.startsWith("digest=")) {
            digest = java.net.URLDecoder.decode(p.substring(7), java.nio.charset.StandardCharsets.UTF_8);
          }
        }
      }
      byte[] body = x.getRequestBody().readAllBytes();
      InMemoryRegistry.Answer a = content.answer(x.getRequestMethod(), x.getRequestURI().getPath(), digest,
          x.getRequestHeaders().getFirst("Range"), x.getRequestHeaders().getFirst("Content-Type"), body);
      // The server sets Content-Length itself from the length given (none for a HEAD).
      a.headers().forEach((k, v) -> {
        if (!k.equalsIgnoreCase("Content-Length")) {
          x.getResponseHeaders().set(k, v);
        }
      });
      boolean empty = x.getRequestMethod().equals("HEAD") || a.body().length == 0;
      x.sendResponseHeaders(a.status(), empty ? -1 : a.body().length);
      if (!empty) {
        try (OutputStream out = x.getResponseBody()) {
          out.write(a.body());
        }
      }
    }
  }

  @Override
  public void close() {
    server.stop(0);
    threads.shutdownNow();
  }
}
