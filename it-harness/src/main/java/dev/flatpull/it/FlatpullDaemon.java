package dev.flatpull.it;

import dev.flatpull.snapshotter.grpc.SnapshotsProbe;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.List;

/**
 * A real {@code flatpull serve} in its own JVM (from the built jar), with its own root and sockets, and the FUSE
 * manager it starts. One per test class; {@link #kill9} and {@link #start} restart the daemon alone.
 */
public final class FlatpullDaemon implements AutoCloseable {
  private final Path dir;
  private final Path config;
  private final Path socket;
  private final Path managerSocket;
  private Process process;
  private int starts;
  // The memory group the daemon (and so the FUSE manager it starts) runs in, when one is given.
  private java.util.Optional<MemoryCgroup> cgroup = java.util.Optional.empty();

  private FlatpullDaemon(Path dir, Path config, Path socket, Path managerSocket) {
    this.dir = dir;
    this.config = config;
    this.socket = socket;
    this.managerSocket = managerSocket;
  }

  /**
   * Writes a configuration (plain HTTP, background fetch off so fetched bytes show what was read, no warm-up) and
   * starts the daemon; {@code extraToml} is appended to the {@code [snapshotter]} table.
   */
  public static FlatpullDaemon start(String extraToml) throws IOException, InterruptedException {
    return start(extraToml, false);
  }

  /**
   * A daemon with flatpull's default fetching (landmark prefetch and background fetch on), as users run it; only
   * what the test harness needs (plain HTTP, short retries, its own root and sockets) differs from the defaults.
   */
  public static FlatpullDaemon startWithDefaultFetching() throws IOException, InterruptedException {
    return start("", true);
  }

  private static FlatpullDaemon start(String extraToml, boolean defaultFetching)
      throws IOException, InterruptedException {
    return start(extraToml, defaultFetching, "");
  }

  /**
   * A daemon with {@code snapshotterToml} in its {@code [snapshotter]} table and {@code tables} (whole TOML tables,
   * such as {@code [runtime_image]}) after it; default fetching and warm-up, as users run it, or the harness's
   * (background fetch off and no warm-up: the warm-ups delay every start by seconds and their own tests are in
   * FuseMountIT and DaemonWarmUpTest).
   */
  public static FlatpullDaemon start(String snapshotterToml, boolean defaultFetching, String tables)
      throws IOException, InterruptedException {
    return start(snapshotterToml, defaultFetching, tables, HARNESS_RETRIES);
  }

  /** The harness's short registry retries and timeouts. */
  private static final String HARNESS_RETRIES = """
      max_attempts = 2
      initial_backoff = "50ms"
      max_backoff = "200ms"
      connect_timeout = "2s"
      read_timeout = "10s"
      """;

  /**
   * Like {@link #start(String, boolean, String)}, with {@code registryToml} for the {@code [registry]} table's retries
   * and timeouts instead of the harness's short ones (empty: flatpull's defaults).
   */
  public static FlatpullDaemon start(String snapshotterToml, boolean defaultFetching, String tables,
      String registryToml) throws IOException, InterruptedException {
    return start(snapshotterToml, defaultFetching, tables, registryToml, java.util.Optional.empty());
  }

  /**
   * Like {@link #start(String, boolean, String)}, the daemon and the FUSE manager it starts in the memory group
   * {@code cgroup}: under its limit, their peak together read from it.
   */
  public static FlatpullDaemon startIn(MemoryCgroup cgroup, String snapshotterToml, boolean defaultFetching,
      String tables) throws IOException, InterruptedException {
    return start(snapshotterToml, defaultFetching, tables, HARNESS_RETRIES, java.util.Optional.of(cgroup));
  }

  private static FlatpullDaemon start(String snapshotterToml, boolean defaultFetching, String tables,
      String registryToml, java.util.Optional<MemoryCgroup> cgroup) throws IOException, InterruptedException {
    Processes.requireFuse();
    Path dir = Files.createTempDirectory(Path.of("/var/tmp"), "fp-");
    Path socket = dir.resolve("flatpull.sock");
    Path managerSocket = dir.resolve("fuse-manager.sock");
    Path config = dir.resolve("flatpull.toml");
    Files.writeString(config, """
        root = "%s"
        [registry]
        plain_http = true
        %s
        [snapshotter]
        socket = "%s"
        fuse_manager_socket = "%s"
        %s
        %s
        %s
        """.formatted(dir.resolve("root"), registryToml, socket, managerSocket,
        defaultFetching ? "" : "background_fetch = false\nwarm_up = false",
        snapshotterToml + managerJavaOptions(), tables));
    FlatpullDaemon d = new FlatpullDaemon(dir, config, socket, managerSocket);
    d.cgroup = cgroup;
    d.start();
    return d;
  }

  /** Starts (or restarts) the daemon and returns once it answers on its socket. */
  public void start() throws IOException, InterruptedException {
    start(List.of());
  }

  /** Like {@link #start()}, with extra JVM options (such as {@code -Dflatpull.crashpoint=NAME}) for this run. */
  public void start(List<String> jvmOptions) throws IOException, InterruptedException {
    Path log = dir.resolve("daemon-" + (++starts) + ".log");
    List<String> cmd = new java.util.ArrayList<>(List.of("java"));
    // As the documented unit runs it; the caller's options after them, so that they win.
    cmd.addAll(DocumentedSetUp.daemonJavaOptions());
    cmd.addAll(jvmOptions);
    cmd.addAll(List.of("-jar", jar().toString(), "serve", "--config", config.toString()));
    process = new ProcessBuilder(cgroup.map(g -> g.wrap(cmd)).orElse(cmd))
        .redirectErrorStream(true).redirectOutput(log.toFile()).start();
    Instant deadline = Instant.now().plus(Duration.ofSeconds(90));
    while (Instant.now().isBefore(deadline)) {
      if (!process.isAlive()) {
        throw new IOException("flatpull serve exited " + process.exitValue() + ": " + Files.readString(log));
      }
      if (Files.exists(socket)) {
        try {
          SnapshotsProbe.count(socket);
          return;
        } catch (IOException notYet) {
          // still starting
        }
      }
      Thread.sleep(100);
    }
    throw new IOException("flatpull serve did not answer within 90 s: " + Files.readString(log));
  }

  private static final java.util.regex.Pattern SERVING = java.util.regex.Pattern.compile("fuse-manager \\d+: serving ");

  private static final java.util.regex.Pattern WARMED = java.util.regex.Pattern.compile(
      "warmed up the remote-layer path|warm-up stopped|warm-up failed");

  /**
   * Waits until the daemon's FUSE manager serves (the daemon starts it) and, unless this configuration turns warm-ups
   * off, has finished the warm-up it runs while serving: a node that is up before its pulls.
   */
  public void awaitManager() throws IOException, InterruptedException {
    Path log = root().resolve("fuse-manager.log");
    boolean warmUp = !Files.readString(config).contains("warm_up = false");
    for (int i = 0; i < 600; i++) {
      // The manager's own line once its socket serves; its warm-up logs "serving" for a synthetic layer after that.
      if (Files.exists(log)) {
        String text = Files.readString(log);
        if (SERVING.matcher(text).find() && (!warmUp || WARMED.matcher(text).find())) {
          return;
        }
      }
      Thread.sleep(100);
    }
    throw new IOException("the FUSE manager did not start" + (warmUp ? " or warm up" : "") + ": " + log());
  }

  /**
   * Waits until the FUSE managers' class-data archive is trained (with warm-ups on, the daemon trains it in the
   * background, {@code class_archive_after} after its first start): a node in its steady state, where every manager
   * started maps it.
   */
  public void awaitClassArchive() throws IOException, InterruptedException {
    Path dir = root().resolve("fuse-manager");
    for (int i = 0; i < 1800; i++) {
      if (Files.isDirectory(dir)) {
        try (var s = Files.list(dir)) {
          if (s.anyMatch(p -> p.getFileName().toString().endsWith(".jsa"))) {
            return;
          }
        }
      }
      Thread.sleep(100);
    }
    Path training = dir.resolve("class-archive-training.log");
    throw new IOException("no class-data archive trained under " + dir + ": "
        + (Files.exists(training) ? Files.readString(training) : log()));
  }

  /** SIGKILL: no shutdown hook runs, nothing is flushed or unmounted. */
  public void kill9() throws InterruptedException {
    process.destroyForcibly();
    process.waitFor();
  }

  /** Waits for the daemon to exit by itself (as at a crash point) and returns its exit status. */
  public int awaitExit() throws InterruptedException {
    if (!process.waitFor(60, java.util.concurrent.TimeUnit.SECONDS)) {
      throw new IllegalStateException("flatpull serve did not exit");
    }
    return process.exitValue();
  }

  public boolean isAlive() {
    return process != null && process.isAlive();
  }

  public Path socket() {
    return socket;
  }

  public Path managerSocket() {
    return managerSocket;
  }

  public Path root() {
    return dir.resolve("root");
  }

  public Path config() {
    return config;
  }

  public String log() throws IOException {
    StringBuilder b = new StringBuilder();
    for (int i = 1; i <= starts; i++) {
      b.append(Files.readString(dir.resolve("daemon-" + i + ".log")));
    }
    Path m = root().resolve("fuse-manager.log");
    if (Files.exists(m)) {
      b.append("--- fuse manager\n").append(Files.readString(m));
    }
    return b.toString();
  }

  /** The daemon's pid, or -1 when it is not running. */
  public long pid() {
    return process != null && process.isAlive() ? process.pid() : -1;
  }

  /** The pid of the FUSE manager serving this daemon's layers, from the socket it listens on. */
  public long managerPid() throws IOException, InterruptedException {
    Processes.Result r = Processes.run(List.of("fuser", managerSocket.toString()), 10);
    String out = r.stdout().trim();
    if (out.isEmpty()) {
      Processes.Result ps = Processes.run(List.of("pgrep", "-f", "fuse-manager --config " + config), 10);
      out = ps.stdout().trim().split("\\s+")[0];
    }
    return out.isEmpty() ? -1 : Long.parseLong(out.split("\\s+")[0]);
  }

  /** Stops the daemon and the FUSE manager (which unmounts its layers), and deletes everything. */
  @Override
  public void close() throws IOException {
    if (process != null) {
      Processes.stop(process);
    }
    try {
      Processes.Result ps = Processes.run(List.of("pkill", "-TERM", "-f", "fuse-manager --config " + config), 10);
      for (int i = 0; i < 100 && Processes.run(List.of("pgrep", "-f", "fuse-manager --config " + config), 10)
          .exitCode() == 0; i++) {
        Thread.sleep(100);
      }
      Processes.run(List.of("pkill", "-KILL", "-f", "fuse-manager --config " + config), 10);
      dev.flatpull.snapshotter.overlay.HostMounts.detachAllUnder(dir);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    keepLogs();
    Processes.deleteTree(dir);
  }

  /**
   * With {@code FLATPULL_IT_LOGS=DIR} in the environment, the daemon's and the FUSE manager's logs are copied there before the node is
   * deleted (one directory per node), to see where a benchmark's start went.
   */
  private void keepLogs() throws IOException {
    String to = System.getenv().getOrDefault("FLATPULL_IT_LOGS", "");
    if (to.isEmpty()) {
      return;
    }
    Path out = Files.createDirectories(Path.of(to)).resolve(dir.getFileName());
    Files.createDirectories(out);
    try (var s = Files.walk(dir, 3)) {
      for (Path p : s.filter(p -> p.getFileName().toString().endsWith(".log") && Files.isRegularFile(p)).toList()) {
        Files.copy(p, out.resolve(p.getFileName()), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
      }
    }
  }

  /**
   * With {@code FLATPULL_IT_MANAGER_JAVA_OPTIONS="-XX:+UseG1GC -Xmn128m"} in the environment, the FUSE manager runs
   * with those options instead of its defaults ({@code fuse_manager_java_options}): to try other heap settings
   * against the defaults' figures (docs/development.md).
   */
  private static String managerJavaOptions() {
    String options = System.getenv().getOrDefault("FLATPULL_IT_MANAGER_JAVA_OPTIONS", "").trim();
    if (options.isEmpty()) {
      return "";
    }
    StringBuilder b = new StringBuilder("\nfuse_manager_java_options = [");
    for (String o : options.split("\\s+")) {
      b.append(b.charAt(b.length() - 1) == '[' ? "" : ", ").append("'").append(o).append("'");
    }
    return b.append("]\n").toString();
  }

  /** The built jar flatpull runs from. */
  public static Path jar() throws IOException {
    Path root = Path.of(System.getProperty("flatpull.root", "..")).toAbsolutePath().normalize();
    try (var s = Files.list(root.resolve("snapshotter/target"))) {
      return s.filter(p -> p.getFileName().toString().matches("flatpull-snapshotter-.*-all\\.jar")).findFirst()
          .orElseThrow(() -> new IOException("no built jar under snapshotter/target; run mvn package"));
    }
  }
}
