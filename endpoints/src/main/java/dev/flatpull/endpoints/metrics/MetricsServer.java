package dev.flatpull.endpoints.metrics;

import com.sun.net.httpserver.HttpServer;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;

/**
 * A process's metrics in Prometheus' text format over plain HTTP at {@code /metrics}. A scrape reads counters the
 * process keeps anyway: it never waits for another process.
 */
public final class MetricsServer implements AutoCloseable {
  private final HttpServer server;

  private MetricsServer(HttpServer server) {
    this.server = server;
  }

  /** Serves {@code meters} at {@code address} (port 0: any free port, see {@link #port}). */
  public static MetricsServer start(InetSocketAddress address, Meters meters) throws IOException {
    PrometheusMeterRegistry registry = meters.registry();
    InetSocketAddress bind = address.isUnresolved()
        ? new InetSocketAddress(address.getHostString(), address.getPort()) : address;
    HttpServer s = HttpServer.create(bind, 16);
    s.createContext("/metrics", exchange -> {
      byte[] body = registry.scrape().getBytes(StandardCharsets.UTF_8);
      exchange.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
      exchange.sendResponseHeaders(200, body.length);
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(body);
      }
    });
    s.setExecutor(null);
    s.start();
    return new MetricsServer(s);
  }

  public int port() {
    return server.getAddress().getPort();
  }

  @Override
  public void close() {
    server.stop(0);
  }
}
