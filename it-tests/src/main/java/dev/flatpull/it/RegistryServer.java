package dev.flatpull.it;

import java.io.IOException;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;

/**
 * A real CNCF distribution registry ({@code docker-registry serve}) on 127.0.0.1 with its own storage, started by the
 * tests and stopped by them. One per test class.
 */
public final class RegistryServer implements AutoCloseable {
  private final Process process;
  private final Path dir;
  private final int port;

  private RegistryServer(Process process, Path dir, int port) {
    this.process = process;
    this.dir = dir;
    this.port = port;
  }

  /** Starts a registry and waits until {@code /v2/} answers. Skips (or fails under CI) without the program. */
  public static RegistryServer start() throws IOException, InterruptedException {
    Path program = Processes.require("docker-registry");
    Path dir = Files.createTempDirectory("flatpull-registry");
    int port = Processes.freePort();
    Path config = dir.resolve("config.yml");
    Files.writeString(config, """
        version: 0.1
        log:
          level: warn
        storage:
          filesystem:
            rootdirectory: %s
          delete:
            enabled: true
        http:
          addr: 127.0.0.1:%d
        """.formatted(dir.resolve("data"), port));
    Process p = new ProcessBuilder(program.toString(), "serve", config.toString())
        .redirectErrorStream(true).redirectOutput(dir.resolve("registry.log").toFile()).start();
    RegistryServer server = new RegistryServer(p, dir, port);
    server.awaitReady(Duration.ofSeconds(30));
    return server;
  }


  private void awaitReady(Duration timeout) throws IOException, InterruptedException {
    Instant deadline = Instant.now().plus(timeout);
    while (Instant.now().isBefore(deadline)) {
      if (!process.isAlive()) {
        throw new IOException("registry exited: " + Files.readString(dir.resolve("registry.log")));
      }
      try {
        HttpURLConnection c = (HttpURLConnection) URI.create("http://" + address() + "/v2/").toURL().openConnection();
        c.setConnectTimeout(500);
        if (c.getResponseCode() == 200) {
          return;
        }
      } catch (IOException notYet) {
        // Still starting.
      }
      Thread.sleep(100);
    }
    throw new IOException("registry did not answer within " + timeout);
  }

  /** {@code 127.0.0.1:PORT}, the registry part of image references. */
  public String address() {
    return "127.0.0.1:" + port;
  }

  @Override
  public void close() throws IOException {
    Processes.stop(process);
    Processes.deleteTree(dir);
  }
}
