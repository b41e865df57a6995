package dev.flatpull.it;

import java.io.IOException;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import org.testcontainers.containers.GenericContainer;
import org.testcontainers.containers.wait.strategy.Wait;
import org.testcontainers.utility.DockerImageName;

/**
 * A real CNCF distribution registry on 127.0.0.1 with its own storage, started by the tests and stopped by them. The
 * integration tests run it under Testcontainers (system property
 * {@code flatpull.registry=container}, set by it-tests' failsafe configuration): a container of a locally built image
 * (see {@link Podman}) whose port is published on the host's loopback. The demo and the benchmarks run Debian's
 * {@code docker-registry serve} as a plain process, so that they need no container engine and no port forwarding
 * sits in the measured path. One per test class, or one per JVM for classes that only push and read
 * ({@link #shared}).
 */
public final class RegistryServer implements AutoCloseable {
  private final Process process;
  private final GenericContainer<?> container;
  private final Path dir;
  private final int port;

  private RegistryServer(Process process, GenericContainer<?> container, Path dir, int port) {
    this.process = process;
    this.container = container;
    this.dir = dir;
    this.port = port;
  }

  private static RegistryServer shared;
  private boolean isShared;

  /**
   * The registry this JVM's test classes share when all they do with a registry is push their own repositories and
   * read them: started at first use, stopped when the JVM exits; its {@link #close} does nothing. A class that stops
   * the registry, looks at its storage or publishes runtime images (listed by the image's digest, which another class
   * may push too) starts its own.
   */
  public static synchronized RegistryServer shared() throws IOException, InterruptedException {
    if (shared == null) {
      RegistryServer s = start();
      s.isShared = true;
      Runtime.getRuntime().addShutdownHook(new Thread(() -> {
        try {
          s.stop();
        } catch (IOException e) {
          System.err.println("stopping the shared registry: " + e);
        }
      }, "shared-registry-stop"));
      shared = s;
    }
    return shared;
  }

  /** Starts a registry and waits until {@code /v2/} answers. Skips (or fails under CI) without the program. */
  public static RegistryServer start() throws IOException, InterruptedException {
    return "container".equals(System.getProperty("flatpull.registry")) ? startContainer() : startProcess();
  }

  private static RegistryServer startContainer() throws IOException, InterruptedException {
    Podman.ensureRunning();
    GenericContainer<?> c = new GenericContainer<>(DockerImageName.parse(Podman.REGISTRY_IMAGE))
        .withExposedPorts(5000)
        .waitingFor(Wait.forHttp("/v2/").forStatusCode(200).withStartupTimeout(Duration.ofSeconds(60)));
    c.start();
    RegistryServer server = new RegistryServer(null, c, null, c.getMappedPort(5000));
    server.awaitReady(Duration.ofSeconds(30));
    return server;
  }

  private static RegistryServer startProcess() throws IOException, InterruptedException {
    return startProcess("");
  }

  /**
   * A pull-through cache of {@code upstream} ({@code http://HOST:PORT}): the distribution registry in proxy mode,
   * always a plain process, so that it reaches an upstream on the host's loopback. Read-only to clients. Until it holds
   * a blob it answers a range read of it with {@code 200} and the whole blob, fetched from upstream, and stores the
   * blob in the background (in Debian's 2.8, also when the client drops the response, and on a {@code HEAD}).
   */
  public static RegistryServer startPullThrough(String upstream) throws IOException, InterruptedException {
    return startProcess("""
        proxy:
          remoteurl: %s
        """.formatted(upstream));
  }

  /**
   * A port that no process listens on can still be taken: a container engine publishes ports with NAT rules, not
   * listeners, so a container left running (by a killed test run) holds one that looks free. A registry that binds
   * such a port never answers on it; it is stopped and started again on another port, a few times.
   */
  private static RegistryServer startProcess(String extraConfig) throws IOException, InterruptedException {
    IOException last = null;
    for (int attempt = 0; attempt < 3; attempt++) {
      try {
        return startProcessOnce(extraConfig);
      } catch (IOException e) {
        last = e;
        System.err.println("registry: " + e.getMessage() + "; trying another port");
      }
    }
    throw last;
  }

  private static RegistryServer startProcessOnce(String extraConfig) throws IOException, InterruptedException {
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
        """.formatted(dir.resolve("data"), port) + extraConfig);
    Process p = new ProcessBuilder(program.toString(), "serve", config.toString())
        .redirectErrorStream(true).redirectOutput(dir.resolve("registry.log").toFile()).start();
    RegistryServer server = new RegistryServer(p, null, dir, port);
    try {
      server.awaitReady(Duration.ofSeconds(30));
    } catch (IOException e) {
      server.close();
      throw new IOException(e.getMessage() + " on port " + port, e);
    }
    return server;
  }

  /** Whether this registry runs under Testcontainers. */
  public boolean inContainer() {
    return container != null;
  }

  private void awaitReady(Duration timeout) throws IOException, InterruptedException {
    Instant deadline = Instant.now().plus(timeout);
    while (Instant.now().isBefore(deadline)) {
      if (process != null && !process.isAlive()) {
        throw new IOException("registry exited: " + Files.readString(dir.resolve("registry.log")));
      }
      if (container != null && !container.isRunning()) {
        throw new IOException("registry container exited: " + container.getLogs());
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
    if (!isShared) {
      stop();
    }
  }

  private void stop() throws IOException {
    if (container != null) {
      container.stop();
      return;
    }
    Processes.stop(process);
    Processes.deleteTree(dir);
  }
}
