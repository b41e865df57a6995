package dev.flatpull.it;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;

/**
 * Podman's Docker-compatible API for Testcontainers, which the integration tests start themselves (no Docker engine
 * runs here): {@code podman system service} on {@link #SOCKET} (the failsafe configuration points
 * {@code DOCKER_HOST} at it), with a containers.conf of its own, and the locally built images the tests run (nothing
 * can be pulled from a public registry). Started by the first JVM that needs it and left running.
 */
public final class Podman {
  /** Where the API listens; {@code DOCKER_HOST=unix://} this, in it-tests' pom. */
  public static final Path SOCKET = Path.of("/run/flatpull-it/podman.sock");
  /** The registry image: Debian's distribution registry binary on an empty base. */
  public static final String REGISTRY_IMAGE = "localhost/flatpull-it-registry:2.8";

  private static Path containersConf;
  private static boolean started;

  private Podman() {}

  /**
   * Starts the API service (if it does not answer yet) and builds the registry image (if absent). The integration
   * tests run in two JVMs at once: the two serialize this on a file lock, and the service, once started, outlives the
   * JVM that started it (another may still be using it; bin/test stops it at its end).
   */
  public static synchronized void ensureRunning() throws IOException, InterruptedException {
    if (started && answers()) {
      return;
    }
    Processes.require("podman");
    Path dir = Files.createDirectories(SOCKET.getParent());
    containersConf = dir.resolve("containers.conf");
    try (FileChannel lockFile = FileChannel.open(dir.resolve("podman.lock"), StandardOpenOption.CREATE,
        StandardOpenOption.WRITE); FileLock lock = lockFile.lock()) {
      // runc fails to set the default rlimits on this kind of machine; none are needed.
      Files.writeString(containersConf, "[containers]\ndefault_ulimits = []\n");
      if (!answers()) {
        Files.deleteIfExists(SOCKET);
        ProcessBuilder pb = new ProcessBuilder("podman", "system", "service", "--time=0", "unix://" + SOCKET)
            .redirectErrorStream(true).redirectOutput(dir.resolve("podman-service.log").toFile());
        pb.environment().put("CONTAINERS_CONF", containersConf.toString());
        Process p = pb.start();
        for (int i = 0; i < 300 && !answers(); i++) {
          if (!p.isAlive()) {
            throw new IOException("podman system service exited: "
                + Files.readString(dir.resolve("podman-service.log")));
          }
          Thread.sleep(100);
        }
        if (!answers()) {
          throw new IOException("podman system service did not answer on " + SOCKET);
        }
      }
      if (run(List.of("podman", "image", "exists", REGISTRY_IMAGE), 60).exitCode() != 0) {
        buildRegistryImage(dir.resolve("registry-image"));
      }
    }
    started = true;
  }

  private static boolean answers() throws IOException, InterruptedException {
    return Files.exists(SOCKET) && Processes.run(List.of("curl", "-sf", "--unix-socket", SOCKET.toString(),
        "http://d/_ping"), 10).exitCode() == 0;
  }

  /**
   * {@code FROM scratch}: the registry binary, the two libraries it links (it is a cgo build), and a configuration
   * that listens on all interfaces of the container (the port is published to the host's loopback).
   */
  private static void buildRegistryImage(Path context) throws IOException, InterruptedException {
    Processes.deleteTree(context);
    Files.createDirectories(context);
    Path program = Processes.require("docker-registry");
    Files.copy(program, context.resolve("docker-registry"), StandardCopyOption.COPY_ATTRIBUTES);
    Files.copy(Path.of("/lib/x86_64-linux-gnu/libc.so.6"), context.resolve("libc.so.6"));
    Files.copy(Path.of("/lib64/ld-linux-x86-64.so.2"), context.resolve("ld-linux-x86-64.so.2"));
    Files.writeString(context.resolve("config.yml"), """
        version: 0.1
        log:
          level: warn
        storage:
          filesystem:
            rootdirectory: /var/lib/registry
          delete:
            enabled: true
        http:
          addr: 0.0.0.0:5000
        """);
    Files.writeString(context.resolve("Containerfile"), """
        FROM scratch
        COPY docker-registry /usr/bin/docker-registry
        COPY libc.so.6 /lib/x86_64-linux-gnu/libc.so.6
        COPY ld-linux-x86-64.so.2 /lib64/ld-linux-x86-64.so.2
        COPY config.yml /etc/docker/registry/config.yml
        EXPOSE 5000
        ENTRYPOINT ["/usr/bin/docker-registry", "serve", "/etc/docker/registry/config.yml"]
        """);
    run(List.of("podman", "build", "-t", REGISTRY_IMAGE, context.toString()), 600)
        .orThrow(List.of("podman", "build"));
  }

  private static Processes.Result run(List<String> cmd, long timeoutSeconds) throws IOException, InterruptedException {
    return Processes.run(cmd, timeoutSeconds, Map.of("CONTAINERS_CONF", containersConf.toString()));
  }
}
