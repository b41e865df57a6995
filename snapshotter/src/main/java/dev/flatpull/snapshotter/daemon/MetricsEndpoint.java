package dev.flatpull.snapshotter.daemon;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.function.Consumer;

/** Prometheus metrics over plain HTTP at {@code /metrics}. */
final class MetricsEndpoint implements AutoCloseable {
  private final HttpServer server;

  private MetricsEndpoint(HttpServer server) {
    this.server = server;
  }

  static MetricsEndpoint start(InetSocketAddress address, Consumer<StringBuilder> writer) throws IOException {
    InetSocketAddress bind = address.isUnresolved()
        ? new InetSocketAddress(address.getHostString(), address.getPort()) : address;
    HttpServer s = HttpServer.create(bind, 16);
    s.createContext("/metrics", exchange -> {
      StringBuilder b = new StringBuilder();
      try {
        writer.accept(b);
      } catch (RuntimeException e) {
        b.append("# collecting failed: ").append(e.getMessage()).append('\n');
      }
      byte[] body = b.toString().getBytes(StandardCharsets.UTF_8);
      exchange.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
      exchange.sendResponseHeaders(200, body.length);
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(body);
      }
    });
    s.setExecutor(null);
    s.start();
    return new MetricsEndpoint(s);
  }

  int port() {
    return server.getAddress().getPort();
  }

  @Override
  public void close() {
    server.stop(0);
  }
}
