package dev.flatpull.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;

/** Runs and finds the external programs the integration tests use. */
public final class Processes {
  /** When set (as {@code .ci/run} does), a missing program fails the test instead of skipping it. */
  public static final String REQUIRE_ENV = "FLATPULL_REQUIRE_IT";

  private Processes() {}

  /** The outcome of a finished command. */
  public record Result(int exitCode, String stdout, String stderr) {
    public Result orThrow(List<String> command) {
      if (exitCode != 0) {
        throw new IllegalStateException(String.join(" ", command) + " exited " + exitCode + ":\n" + stderr + stdout);
      }
      return this;
    }
  }

  /** The absolute path of a program on PATH; skips the test (or fails, under CI) when it is absent. */
  public static Path require(String program) {
    for (String dir : System.getenv().getOrDefault("PATH", "/usr/bin:/bin").split(":")) {
      Path p = Path.of(dir, program);
      if (Files.isExecutable(p)) {
        return p;
      }
    }
    String reason = program + " is not installed (Debian package: " + packageOf(program) + ")";
    if (System.getenv(REQUIRE_ENV) != null) {
      throw new IllegalStateException(reason);
    }
    Assumptions.abort(reason);
    return null;
  }

  /** Skips (or fails, under CI) unless this process can mount FUSE file systems. */
  public static void requireFuse() {
    require("fusermount");
    if (!Files.exists(Path.of("/dev/fuse"))) {
      String reason = "/dev/fuse is absent";
      if (System.getenv(REQUIRE_ENV) != null) {
        throw new IllegalStateException(reason);
      }
      Assumptions.abort(reason);
    }
  }

  private static String packageOf(String program) {
    return switch (program) {
      case "docker-registry" -> "docker-registry";
      case "ctr-remote" -> "stargz-snapshotter";
      case "containerd", "ctr" -> "containerd";
      case "fusermount" -> "fuse3";
      case "systemd-analyze" -> "systemd";
      case "fuser" -> "psmisc";
      default -> program;
    };
  }

  /** Runs a command to completion (at most {@code timeoutSeconds}), capturing its output. */
  public static Result run(List<String> command, long timeoutSeconds) throws IOException, InterruptedException {
    return run(command, timeoutSeconds, java.util.Map.of());
  }

  /** Like {@link #run(List, long)}, with {@code env} added to this process's environment. */
  public static Result run(List<String> command, long timeoutSeconds, java.util.Map<String, String> env)
      throws IOException, InterruptedException {
    Path out = Files.createTempFile("flatpull-it", ".out");
    Path err = Files.createTempFile("flatpull-it", ".err");
    try {
      ProcessBuilder pb = new ProcessBuilder(command).redirectOutput(out.toFile()).redirectError(err.toFile());
      pb.environment().putAll(env);
      Process p = pb.start();
      if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        throw new IOException(String.join(" ", command) + " did not finish in " + timeoutSeconds + " s");
      }
      return new Result(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
    } finally {
      Files.deleteIfExists(out);
      Files.deleteIfExists(err);
    }
  }

  /** Stops a server process: SIGTERM, then SIGKILL after a grace period. */
  public static void stop(Process p) {
    if (p == null || !p.isAlive()) {
      return;
    }
    p.destroy();
    try {
      if (!p.waitFor(10, TimeUnit.SECONDS)) {
        p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      p.destroyForcibly();
      Thread.currentThread().interrupt();
    }
  }

  /** Deletes a directory tree, ignoring what is already gone (or vanishes meanwhile, as an unmounting tree does). */
  public static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    Files.walkFileTree(dir, new java.nio.file.SimpleFileVisitor<>() {
      @Override
      public java.nio.file.FileVisitResult visitFile(Path file, java.nio.file.attribute.BasicFileAttributes attrs)
          throws IOException {
        Files.deleteIfExists(file);
        return java.nio.file.FileVisitResult.CONTINUE;
      }

      @Override
      public java.nio.file.FileVisitResult visitFileFailed(Path file, IOException e) throws IOException {
        if (e instanceof java.nio.file.NoSuchFileException) {
          return java.nio.file.FileVisitResult.CONTINUE;
        }
        throw e;
      }

      @Override
      public java.nio.file.FileVisitResult postVisitDirectory(Path d, IOException e) throws IOException {
        if (e != null && !(e instanceof java.nio.file.NoSuchFileException)) {
          throw e;
        }
        Files.deleteIfExists(d);
        return java.nio.file.FileVisitResult.CONTINUE;
      }
    });
  }

  /** Writes dirty pages and drops the kernel's page, dentry and inode caches: a cold start's first condition. */
  public static void dropCaches() throws IOException, InterruptedException {
    run(List.of("sync"), 60);
    Files.writeString(Path.of("/proc/sys/vm/drop_caches"), "3");
  }

  /** Waits for an HTTP 200 from {@code url} (polled every 20 ms): an HTTP server's readiness. */
  public static void awaitHttp200(String url, java.time.Duration timeout) throws IOException, InterruptedException {
    java.net.http.HttpClient h = java.net.http.HttpClient.newBuilder()
        .connectTimeout(java.time.Duration.ofSeconds(1)).build();
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() < deadline) {
      try {
        if (h.send(java.net.http.HttpRequest.newBuilder(java.net.URI.create(url))
            .timeout(java.time.Duration.ofSeconds(2)).build(),
            java.net.http.HttpResponse.BodyHandlers.discarding()).statusCode() == 200) {
          return;
        }
      } catch (IOException notYet) {
        // Not listening yet.
      }
      Thread.sleep(20);
    }
    throw new IOException("no HTTP 200 from " + url + " within " + timeout);
  }

  /** A TCP port free on 127.0.0.1 when asked (for a server the caller starts next). */
  public static int freePort() throws IOException {
    try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  /** The resident set of process {@code pid} in bytes (VmRSS), or -1 when it is gone. */
  /** The peak resident set of a process (VmHWM) since it started or {@link #resetPeakResident}; -1 once it exited. */
  public static long peakResidentBytes(long pid) {
    return statusBytes(pid, "VmHWM:");
  }

  /** Starts a process's peak resident set (VmHWM) again from its current one ({@code clear_refs} 5). */
  public static void resetPeakResident(long pid) {
    try {
      Files.writeString(Path.of("/proc/" + pid + "/clear_refs"), "5");
    } catch (IOException gone) {
      // exited
    }
  }

  private static long statusBytes(long pid, String key) {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
        if (line.startsWith(key)) {
          return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
        }
      }
    } catch (IOException gone) {
      // exited
    }
    return -1;
  }

  public static long residentBytes(long pid) {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
        if (line.startsWith("VmRSS:")) {
          return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
        }
      }
    } catch (IOException gone) {
      // exited
    }
    return -1;
  }
}
