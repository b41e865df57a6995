package dev.flatpull.it;

import java.io.IOException;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;

/**
 * A range-aware registry cache: nginx with its slice module and proxy_cache in front of a registry, the other common
 * shape of a pull-through cache beside the distribution registry's proxy mode. Blobs are fetched from upstream and
 * cached in 1 MiB slices, each slice once however many clients miss it at the same time ({@code proxy_cache_lock});
 * range reads are answered with 206 from the first request on. Manifests and tags pass through uncached. A plain
 * process with its own prefix directory; needs Debian's {@code nginx} (built with {@code --with-http_slice_module}).
 */
public final class SliceCache implements AutoCloseable {
  /** The slice size: the least a miss moves from upstream. */
  public static final String SLICE = "1m";

  private final Process process;
  private final Path dir;
  private final int port;

  private SliceCache(Process process, Path dir, int port) {
    this.process = process;
    this.dir = dir;
    this.port = port;
  }

  /** Starts nginx in front of {@code upstream} ({@code HOST:PORT}) and waits until it answers. */
  public static SliceCache start(String upstream) throws IOException, InterruptedException {
    Path nginx = Processes.require("nginx");
    Path dir = Files.createTempDirectory("flatpull-slice-cache");
    Files.createDirectories(dir.resolve("tmp"));
    int port = Processes.freePort();
    Path conf = dir.resolve("nginx.conf");
    Files.writeString(conf, """
        daemon off;
        user root;
        worker_processes 2;
        pid %1$s/nginx.pid;
        error_log %1$s/error.log warn;
        events { worker_connections 1024; }
        http {
          access_log %1$s/access.log;
          client_body_temp_path %1$s/tmp/body;
          proxy_temp_path %1$s/tmp/proxy;
          fastcgi_temp_path %1$s/tmp/fastcgi;
          uwsgi_temp_path %1$s/tmp/uwsgi;
          scgi_temp_path %1$s/tmp/scgi;
          proxy_cache_path %1$s/cache levels=1:2 keys_zone=blobs:16m max_size=20g inactive=1h use_temp_path=off;
          server {
            listen 127.0.0.1:%2$d;
            location ~ ^/v2/.+/blobs/sha256:[0-9a-f]+$ {
              slice %3$s;
              proxy_cache blobs;
              proxy_cache_key $uri$slice_range;
              proxy_set_header Range $slice_range;
              proxy_cache_valid 200 206 1h;
              proxy_cache_lock on;
              proxy_cache_lock_timeout 60s;
              proxy_http_version 1.1;
              proxy_pass http://%4$s;
            }
            location / {
              proxy_http_version 1.1;
              proxy_pass http://%4$s;
            }
          }
        }
        """.formatted(dir, port, SLICE, upstream));
    Process p = new ProcessBuilder(nginx.toString(), "-p", dir.toString(), "-c", conf.toString())
        .redirectErrorStream(true).redirectOutput(dir.resolve("nginx.out").toFile()).start();
    SliceCache cache = new SliceCache(p, dir, port);
    Instant deadline = Instant.now().plus(Duration.ofSeconds(30));
    while (Instant.now().isBefore(deadline)) {
      if (!p.isAlive()) {
        throw new IOException("nginx exited: " + Files.readString(dir.resolve("nginx.out")));
      }
      try {
        HttpURLConnection c = (HttpURLConnection) URI.create("http://" + cache.address() + "/v2/").toURL()
            .openConnection();
        c.setConnectTimeout(500);
        if (c.getResponseCode() == 200) {
          return cache;
        }
      } catch (IOException notYet) {
        // Still starting.
      }
      Thread.sleep(100);
    }
    cache.close();
    throw new IOException("nginx did not answer within 30 s");
  }

  public String address() {
    return "127.0.0.1:" + port;
  }

  @Override
  public void close() throws IOException {
    Processes.stop(process);
    Processes.deleteTree(dir);
  }
}
