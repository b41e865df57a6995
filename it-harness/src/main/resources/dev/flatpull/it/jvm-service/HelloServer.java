import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.concurrent.Executors;
import java.util.logging.Logger;

/**
 * The benchmarks' JVM service: an HTTP server on 127.0.0.1:8080 that answers every path with its version (a resource
 * of its jar) as JSON, and logs its start. Compiled into /opt/hello/hello.jar of the image; started with the image's
 * JDK and its defaults, as a service packaged as a jar would be.
 */
public final class HelloServer {
  private static final Logger LOG = Logger.getLogger(HelloServer.class.getName());

  public static void main(String[] args) throws IOException {
    String version;
    try (InputStream in = HelloServer.class.getResourceAsStream("/version.txt")) {
      version = new String(in.readAllBytes(), StandardCharsets.UTF_8).strip();
    }
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 8080), 64);
    server.setExecutor(Executors.newFixedThreadPool(4));
    server.createContext("/", exchange -> {
      byte[] body = String.format("{\"service\":\"hello\",\"version\":\"%s\",\"time\":\"%s\"}%n", version,
          Instant.now()).getBytes(StandardCharsets.UTF_8);
      exchange.getResponseHeaders().set("Content-Type", "application/json");
      exchange.sendResponseHeaders(200, body.length);
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(body);
      }
    });
    server.start();
    LOG.info("hello " + version + " listening on 127.0.0.1:8080");
  }
}
