package dev.flatpull.snapshotter.warmup;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.flatpull.core.Digest;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * A read-only OCI registry on 127.0.0.1 serving what it is given: manifests by tag and blobs by digest, with single
 * byte ranges. Only for {@link WarmUp}, which drives the real registry client through it: just enough of the
 * distribution API for a pull, and nothing a real registry would be trusted for.
 */
public final class LoopbackRegistry implements AutoCloseable {
  private record Manifest(String mediaType, byte[] bytes) {}

  private final HttpServer server;
  private final ExecutorService threads;
  private final Map<String, Manifest> manifests = new ConcurrentHashMap<>();
  private final Map<String, byte[]> blobs = new ConcurrentHashMap<>();

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
    s.createContext("/v2/", r::handle);
    s.start();
    return r;
  }

  /** {@code 127.0.0.1:PORT}, the registry part of a reference. */
  public String address() {
    return "127.0.0.1:" + server.getAddress().getPort();
  }

  void manifest(String repository, String tag, String mediaType, byte[] bytes) {
    manifests.put("/v2/" + repository + "/manifests/" + tag, new Manifest(mediaType, bytes));
  }

  void blob(String repository, Digest digest, byte[] bytes) {
    blobs.put("/v2/" + repository + "/blobs/" + digest, bytes);
  }

  private void handle(HttpExchange x) throws IOException {
    try (x) {
      String path = x.getRequestURI().getPath();
      boolean head = x.getRequestMethod().equals("HEAD");
      if (path.equals("/v2/")) {
        send(x, 200, "application/json", "{}".getBytes(), head);
        return;
      }
      Manifest m = manifests.get(path);
      if (m != null) {
        x.getResponseHeaders().set("Docker-Content-Digest", Digest.sha256(m.bytes()).toString());
        send(x, 200, m.mediaType(), m.bytes(), head);
        return;
      }
      byte[] blob = blobs.get(path);
      if (blob == null) {
        send(x, 404, "application/json", "{\"errors\":[{\"code\":\"BLOB_UNKNOWN\"}]}".getBytes(), head);
        return;
      }
      String range = x.getRequestHeaders().getFirst("Range");
      if (range == null || !range.startsWith("bytes=")) {
        send(x, 200, "application/octet-stream", blob, head);
        return;
      }
      String[] se = range.substring(6).split("-", 2);
      int start = Integer.parseInt(se[0]);
      int end = se[1].isEmpty() ? blob.length - 1 : Math.min(blob.length - 1, Integer.parseInt(se[1]));
      x.getResponseHeaders().set("Content-Range", "bytes " + start + "-" + end + "/" + blob.length);
      send(x, 206, "application/octet-stream", java.util.Arrays.copyOfRange(blob, start, end + 1), head);
    }
  }

  private static void send(HttpExchange x, int status, String type, byte[] body, boolean head) throws IOException {
    x.getResponseHeaders().set("Content-Type", type);
    x.sendResponseHeaders(status, head ? -1 : body.length);
    if (!head) {
      try (OutputStream out = x.getResponseBody()) {
        out.write(body);
      }
    }
  }

  @Override
  public void close() {
    server.stop(0);
    threads.shutdownNow();
  }
}
