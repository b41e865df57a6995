package dev.flatpull.config;

import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * All of flatpull's settings. Load with {@link #load(Path)}; every key is optional and documented with its default in
 * {@code docs/configuration.md}.
 *
 * @param root directory for flatpull's state (caches, temporary files)
 */
public record FlatpullConfig(
    Path root, RegistrySettings registry, FetchLimits limits, CacheSettings cache, SnapshotterSettings snapshotter,
    RuntimeImageSettings runtimeImage, FuseSettings fuse) {
  public static final Path DEFAULT_ROOT = Path.of("/var/lib/flatpull");
  public static final FlatpullConfig DEFAULTS = new FlatpullConfig(DEFAULT_ROOT, RegistrySettings.DEFAULTS,
      FetchLimits.DEFAULTS, CacheSettings.DEFAULTS, SnapshotterSettings.DEFAULTS, RuntimeImageSettings.DEFAULTS,
      FuseSettings.DEFAULTS);

  public FlatpullConfig {
    Objects.requireNonNull(root);
    Objects.requireNonNull(registry);
    Objects.requireNonNull(limits);
    Objects.requireNonNull(cache);
    Objects.requireNonNull(snapshotter);
    Objects.requireNonNull(runtimeImage);
    Objects.requireNonNull(fuse);
  }

  public FlatpullConfig withRegistry(RegistrySettings r) {
    return new FlatpullConfig(root, r, limits, cache, snapshotter, runtimeImage, fuse);
  }

  public FlatpullConfig withLimits(FetchLimits l) {
    return new FlatpullConfig(root, registry, l, cache, snapshotter, runtimeImage, fuse);
  }

  public FlatpullConfig withSnapshotter(SnapshotterSettings s) {
    return new FlatpullConfig(root, registry, limits, cache, s, runtimeImage, fuse);
  }

  public FlatpullConfig withFuse(FuseSettings f) {
    return new FlatpullConfig(root, registry, limits, cache, snapshotter, runtimeImage, f);
  }

  public FlatpullConfig withRuntimeImage(RuntimeImageSettings ri) {
    return new FlatpullConfig(root, registry, limits, cache, snapshotter, ri, fuse);
  }

  /**
   * Reads and validates a TOML configuration file.
   *
   * @throws ConfigException naming the file, the key and the reason, for unreadable TOML, wrong types, values out of
   *     range and unknown keys
   */
  public static FlatpullConfig load(Path file) throws ConfigException {
    return from(TomlTable.parse(file));
  }

  /** Parses configuration text; {@code fileName} appears in error messages. */
  public static FlatpullConfig parse(String fileName, String toml) throws ConfigException {
    return from(TomlTable.parse(fileName, toml));
  }

  private static FlatpullConfig from(TomlTable top) throws ConfigException {
    Path root = path(top, "root", DEFAULTS.root());
    RegistrySettings r = registry(top.table("registry"));
    FetchLimits l = limits(top.table("limits"));
    TomlTable cacheTable = top.table("cache");
    CacheSettings c = cache(cacheTable);
    SnapshotterSettings s = snapshotter(top.table("snapshotter"));
    // The memory tier lives in the FUSE manager's heap: a tier the ceiling cannot hold beside a start's allocation and
    // the mounted trees ends in OutOfMemoryError on a node, so it is refused here.
    long ceiling = s.fuseManagerHeapCeiling().orElse(Long.MAX_VALUE);
    if (c.memoryBytes() > ceiling / 2) {
      throw cacheTable.invalid("memory_size", c.memoryBytes() + " bytes is more than half the FUSE manager's heap"
          + " ceiling (" + ceiling + " bytes, [snapshotter] fuse_manager_java_options): raise its -Xmx with it");
    }
    RuntimeImageSettings ri = runtimeImage(top.table("runtime_image"));
    FuseSettings f = fuse(top.table("fuse"));
    top.rejectUnknownKeys();
    return new FlatpullConfig(root, r, l, c, s, ri, f);
  }

  private static RegistrySettings registry(TomlTable t) throws ConfigException {
    RegistrySettings d = RegistrySettings.DEFAULTS;
    String hosts = t.string("config_path", d.hostsDirectory().map(Path::toString).orElse(""));
    String creds = t.string("credentials", "");
    Duration initial = positive(t, "initial_backoff", d.initialBackoff());
    Duration max = positive(t, "max_backoff", d.maxBackoff());
    if (max.compareTo(initial) < 0) {
      throw t.invalid("max_backoff", "must not be shorter than initial_backoff");
    }
    RegistrySettings r =
        new RegistrySettings(
            hosts.isEmpty() ? Optional.empty() : Optional.of(Path.of(hosts)),
            creds.isEmpty() ? Optional.empty() : Optional.of(Path.of(creds)),
            t.bool("plain_http", d.plainHttp()),
            (int) t.integer("max_concurrent_requests", d.maxConcurrentRequests(), 1, 1024),
            positive(t, "connect_timeout", d.connectTimeout()),
            positive(t, "read_timeout", d.readTimeout()),
            (int) t.integer("max_attempts", d.maxAttempts(), 1, 100),
            initial,
            max,
            t.bytes("coalesce_gap", d.coalesceGapBytes(), 0, 1L << 30));
    t.rejectUnknownKeys();
    return r;
  }

  private static FetchLimits limits(TomlTable t) throws ConfigException {
    FetchLimits d = FetchLimits.DEFAULTS;
    FetchLimits l =
        new FetchLimits(
            t.bytes("max_manifest_size", d.maxManifestBytes(), 1024, 1L << 30),
            t.bytes("max_toc_size", d.maxTocBytes(), 1024, 16L << 30),
            t.integer("max_toc_entries", d.maxTocEntries(), 1, 1L << 31),
            t.bytes("max_chunk_size", d.maxChunkBytes(), 4096, 4L << 30),
            t.bytes("max_layer_size", d.maxLayerBytes(), 1024, Long.MAX_VALUE));
    t.rejectUnknownKeys();
    return l;
  }

  private static CacheSettings cache(TomlTable t) throws ConfigException {
    CacheSettings d = CacheSettings.DEFAULTS;
    String dir = t.string("directory", "");
    CacheSettings c =
        new CacheSettings(
            dir.isEmpty() ? Optional.empty() : Optional.of(Path.of(dir)),
            t.bytes("memory_size", d.memoryBytes(), 0, Long.MAX_VALUE),
            t.bytes("disk_size", d.diskBytes(), 0, Long.MAX_VALUE),
            t.duration("reservation_wait", d.reservationWait()));
    t.rejectUnknownKeys();
    return c;
  }

  private static SnapshotterSettings snapshotter(TomlTable t) throws ConfigException {
    SnapshotterSettings d = SnapshotterSettings.DEFAULTS;
    String metrics = t.string("metrics_address", "");
    String managerMetrics = t.string("fuse_manager_metrics_address", "");
    SnapshotterSettings s = new SnapshotterSettings(
        path(t, "socket", d.socket()),
        path(t, "fuse_manager_socket", d.fuseManagerSocket()),
        metrics.isEmpty() ? Optional.empty() : Optional.of(hostPort(t, "metrics_address", metrics)),
        managerMetrics.isEmpty() ? Optional.empty()
            : Optional.of(hostPort(t, "fuse_manager_metrics_address", managerMetrics)),
        t.bool("prefetch", d.prefetch()),
        t.bool("background_fetch", d.backgroundFetch()),
        t.duration("background_fetch_quiet", d.backgroundFetchQuiet()),
        javaOptions(t, "fuse_manager_java_options", d.fuseManagerJavaOptions()),
        t.bool("warm_up", d.warmUp()),
        t.bool("require_tar_split", d.requireTarSplit()),
        t.duration("class_archive_after", d.classArchiveAfter()));
    t.rejectUnknownKeys();
    return s;
  }

  private static List<String> javaOptions(TomlTable t, String key, List<String> fallback) throws ConfigException {
    List<String> options = t.strings(key, fallback);
    for (String o : options) {
      if (!o.startsWith("-")) {
        throw t.invalid(key, "not a JVM option: \"" + o + "\"");
      }
    }
    return options;
  }

  private static FuseSettings fuse(TomlTable t) throws ConfigException {
    String name = t.string("engine", FuseSettings.DEFAULTS.engine().configName());
    FuseSettings.Engine engine = FuseSettings.Engine.named(name)
        .orElseThrow(() -> t.invalid("engine", "\"" + name + "\" is not an engine (kernel, libfuse)"));
    FuseSettings d = FuseSettings.DEFAULTS;
    boolean passthrough = t.bool("passthrough", d.passthrough());
    long minBytes = t.bytes("passthrough_min_bytes", d.passthroughMinBytes(), 1, Long.MAX_VALUE);
    t.rejectUnknownKeys();
    return new FuseSettings(engine, passthrough, minBytes);
  }

  private static RuntimeImageSettings runtimeImage(TomlTable t) throws ConfigException {
    RuntimeImageSettings d = RuntimeImageSettings.DEFAULTS;
    String verify = t.string("verify", d.verify().key());
    RuntimeImageSettings.Verification v;
    try {
      v = RuntimeImageSettings.Verification.of(verify);
    } catch (IllegalArgumentException e) {
      throw t.invalid("verify", e.getMessage());
    }
    String service = t.string("service", "");
    RuntimeImageSettings ri = new RuntimeImageSettings(v, t.bytes("frame_size", d.frameSize(), 4096, 64L << 20),
        (int) t.integer("level", d.level(), 1, 22), t.bool("load", d.load()),
        service.isBlank() ? Optional.empty() : Optional.of(service), positive(t, "stall", d.stall()),
        t.duration("startup_window", d.startupWindow()),
        new RuntimeImageSettings.Limits(t.share("max_share", d.limits().maxShare()),
            (int) t.integer("index_bytes_per_extent", d.limits().indexBytesPerExtent(), 64, 65536),
            t.bytes("frame_slack", d.limits().frameSlack(), 0, 1L << 20)), t.bool("borrow", d.borrow()),
        t.share("borrow_min_overlap", d.borrowMinOverlap()));
    t.rejectUnknownKeys();
    return ri;
  }

  private static InetSocketAddress hostPort(TomlTable t, String key, String value) throws ConfigException {
    int colon = value.lastIndexOf(':');
    if (colon <= 0) {
      throw t.invalid(key, "must be HOST:PORT, got '" + value + "'");
    }
    try {
      int port = Integer.parseInt(value.substring(colon + 1));
      if (port < 0 || port > 65535) {
        throw t.invalid(key, "port must be within 0..65535, got " + port);
      }
      return InetSocketAddress.createUnresolved(value.substring(0, colon).replace("[", "").replace("]", ""), port);
    } catch (NumberFormatException e) {
      throw t.invalid(key, "must be HOST:PORT, got '" + value + "'");
    }
  }

  private static Duration positive(TomlTable t, String key, Duration fallback) throws ConfigException {
    Duration d = t.duration(key, fallback);
    if (d.isZero()) {
      throw t.invalid(key, "must be longer than zero");
    }
    return d;
  }

  private static Path path(TomlTable t, String key, Path fallback) throws ConfigException {
    String s = t.string(key, fallback.toString());
    if (s.isEmpty()) {
      throw t.invalid(key, "must not be empty");
    }
    return Path.of(s);
  }
}
