package dev.flatpull.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class FlatpullConfigTest {
  @TempDir Path dir;

  @Test
  void parse_empty_givesDefaults() throws Exception {
    assertEquals(FlatpullConfig.DEFAULTS, FlatpullConfig.parse("c.toml", ""));
  }

  @Test
  void load_everyKey_isRead() throws Exception {
    Path f = dir.resolve("config.toml");
    Files.writeString(f, """
        root = "/srv/flatpull"
        [registry]
        config_path = "/etc/hosts.d"
        credentials = "/root/.docker/config.json"
        plain_http = true
        max_concurrent_requests = 4
        connect_timeout = "3s"
        read_timeout = "1m"
        max_attempts = 2
        initial_backoff = "50ms"
        max_backoff = "2s"
        coalesce_gap = "128KiB"
        [limits]
        max_manifest_size = "1MiB"
        max_toc_size = 1048576
        max_toc_entries = 10
        max_chunk_size = "8MiB"
        max_layer_size = "1GiB"
        [cache]
        directory = "/srv/cache"
        memory_size = "64MiB"
        disk_size = "2GiB"
        reservation_wait = "5s"
        [snapshotter]
        socket = "/run/fp/fp.sock"
        fuse_manager_socket = "/run/fp/fm.sock"
        metrics_address = "127.0.0.1:9901"
        fuse_manager_metrics_address = "127.0.0.1:9902"
        prefetch = false
        background_fetch = false
        background_fetch_quiet = "750ms"
        fuse_manager_java_options = ["-Xmn128m", "-XX:+UseParallelGC"]
        [runtime_image]
        verify = "runtime-image"
        frame_size = "1MiB"
        level = 3
        load = false
        service = "a1b2c3"
        stall = "250ms"
        startup_window = "5s"
        max_share = 0.5
        index_bytes_per_extent = 512
        frame_slack = "8KiB"
        [fuse]
        engine = "libfuse"
        passthrough = true
        passthrough_min_bytes = "1MiB"
        """);
    FlatpullConfig c = FlatpullConfig.load(f);
    assertEquals(Path.of("/srv/flatpull"), c.root());
    assertEquals(Optional.of(Path.of("/etc/hosts.d")), c.registry().hostsDirectory());
    assertEquals(true, c.registry().plainHttp());
    assertEquals(Duration.ofMinutes(1), c.registry().readTimeout());
    assertEquals(128 * 1024, c.registry().coalesceGapBytes());
    assertEquals(8L << 20, c.limits().maxChunkBytes());
    assertEquals(1L << 30, c.limits().maxLayerBytes());
    assertEquals(Path.of("/srv/cache"), c.cache().directoryUnder(c.root()));
    assertEquals(64L << 20, c.cache().memoryBytes());
    assertEquals(2L << 30, c.cache().diskBytes());
    assertEquals(Duration.ofSeconds(5), c.cache().reservationWait());
    assertEquals(Path.of("/run/fp/fp.sock"), c.snapshotter().socket());
    assertEquals(Path.of("/run/fp/fm.sock"), c.snapshotter().fuseManagerSocket());
    assertEquals(9901, c.snapshotter().metricsAddress().orElseThrow().getPort());
    assertEquals(Duration.ofMillis(750), c.snapshotter().backgroundFetchQuiet());
    assertEquals(List.of("-Xmn128m", "-XX:+UseParallelGC"), c.snapshotter().fuseManagerJavaOptions());
    assertEquals("127.0.0.1", c.snapshotter().metricsAddress().orElseThrow().getHostString());
    assertEquals(false, c.snapshotter().prefetch());
    assertEquals(false, c.snapshotter().backgroundFetch());
    assertEquals(RuntimeImageSettings.Verification.RUNTIME_IMAGE, c.runtimeImage().verify());
    assertEquals(1L << 20, c.runtimeImage().frameSize());
    assertEquals(3, c.runtimeImage().level());
    assertEquals(false, c.runtimeImage().load());
    assertEquals(Optional.of("a1b2c3"), c.runtimeImage().service());
    assertEquals(Duration.ofMillis(250), c.runtimeImage().stall());
    assertEquals(Duration.ofSeconds(5), c.runtimeImage().startupWindow());
    assertEquals(new RuntimeImageSettings.Limits(0.5, 512, 8192), c.runtimeImage().limits());
    assertEquals(9902, c.snapshotter().fuseManagerMetricsAddress().orElseThrow().getPort());
    assertEquals(FuseSettings.Engine.LIBFUSE, c.fuse().engine());
    assertEquals(true, c.fuse().passthrough());
    assertEquals(1L << 20, c.fuse().passthroughMinBytes());
  }

  @Test
  void parse_passthrough_isOffByDefault_forFilesOfMoreThanOneReadaheadWindow_andAMinimumBelowOneIsRefused()
      throws Exception {
    FuseSettings d = FuseSettings.DEFAULTS;
    assertFalse(d.passthrough());
    assertTrue(FlatpullConfig.parse("f.toml", "[fuse]\npassthrough = true\n").fuse().passthrough());
    assertEquals(256L << 10, d.passthroughMinBytes());
    ConfigException e = assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("f.toml", "[fuse]\npassthrough_min_bytes = 0\n"));
    assertEquals("fuse.passthrough_min_bytes", e.key());
  }

  @Test
  void parse_fuseEngine_isTheKernelsByDefault_andAnUnknownOneIsRefusedWithTheChoices() throws Exception {
    assertEquals(FuseSettings.Engine.KERNEL, FlatpullConfig.parse("f.toml", "").fuse().engine());
    assertEquals(FuseSettings.Engine.KERNEL, FlatpullConfig.parse("f.toml", "[fuse]\nengine = \"kernel\"\n").fuse()
        .engine());
    ConfigException e = assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("f.toml", "[fuse]\nengine = \"fuse3\"\n"));
    assertEquals("fuse.engine", e.key());
    assertTrue(e.getMessage().contains("kernel, libfuse"), e.getMessage());
  }

  @Test
  void parse_aShareOutsideZeroToOne_isRefusedNamingTheKey() {
    for (String v : List.of("0", "1.5", "-0.2", "\"half\"")) {
      ConfigException e = assertThrows(ConfigException.class,
          () -> FlatpullConfig.parse("f.toml", "[runtime_image]\nmax_share = " + v + "\n"));
      assertEquals("runtime_image.max_share", e.key(), v);
    }
    assertEquals(0.75, FlatpullConfig.DEFAULTS.runtimeImage().limits().maxShare());
  }

  @Test
  void parse_unknownVerification_isRefusedWithTheChoices() {
    ConfigException e = assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("f.toml", "[runtime_image]\nverify = \"nothing\"\n"));
    assertEquals("runtime_image.verify", e.key());
    assertTrue(e.getMessage().contains("image, runtime-image"), e.getMessage());
    assertEquals(RuntimeImageSettings.Verification.IMAGE, FlatpullConfig.DEFAULTS.runtimeImage().verify());
  }

  @Test
  void parse_metricsAddressWithoutPort_isRefused() {
    ConfigException e = assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("f.toml", "[snapshotter]\nmetrics_address = \"localhost\"\n"));
    assertEquals("snapshotter.metrics_address", e.key());
    assertTrue(e.getMessage().contains("HOST:PORT"), e.getMessage());
  }

  @Test
  void parse_fuseManagerJavaOptions_areOptionsAndDefaultToALargeYoungGeneration() throws Exception {
    assertEquals(SnapshotterSettings.FUSE_MANAGER_JAVA_OPTIONS, FlatpullConfig.parse("f", "").snapshotter().fuseManagerJavaOptions());
    assertEquals(List.of(),
        FlatpullConfig.parse("f", "[snapshotter]\nfuse_manager_java_options = []").snapshotter().fuseManagerJavaOptions());
    ConfigException e = assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("f", "[snapshotter]\nfuse_manager_java_options = [\"Xmx1g\"]"));
    assertEquals("snapshotter.fuse_manager_java_options", e.key());
    assertTrue(e.getMessage().contains("not a JVM option"), e.getMessage());
  }

  @Test
  void parse_aMemoryTierOverHalfTheManagersHeapCeiling_isRefused_andOneWithoutACeilingIsNot() throws Exception {
    // The defaults leave the ceiling to the JVM: any tier goes.
    assertTrue(FlatpullConfig.parse("f", "").snapshotter().fuseManagerHeapCeiling().isEmpty());
    assertEquals(8L << 30, FlatpullConfig.parse("f", "[cache]\nmemory_size = \"8GiB\"\n").cache().memoryBytes());
    ConfigException e = assertThrows(ConfigException.class, () -> FlatpullConfig.parse("f",
        "[cache]\nmemory_size = \"768MiB\"\n[snapshotter]\nfuse_manager_java_options = [\"-Xmx1g\"]"));
    assertEquals("cache.memory_size", e.key());
    assertTrue(e.getMessage().contains("-Xmx"), e.getMessage());
    // The last ceiling wins, whichever way it is written, as in the JVM.
    assertEquals(768L << 20, FlatpullConfig.parse("f", "[cache]\nmemory_size = \"768MiB\"\n[snapshotter]\n"
        + "fuse_manager_java_options = [\"-Xmx1g\", \"-Xmx2048m\"]").cache().memoryBytes());
    assertEquals(256L << 20, FlatpullConfig.parse("f",
        "[snapshotter]\nfuse_manager_java_options = [\"-XX:MaxHeapSize=536870912\"]").snapshotter()
        .fuseManagerHeapCeiling().getAsLong() / 2);
    assertThrows(ConfigException.class, () -> FlatpullConfig.parse("f",
        "[snapshotter]\nfuse_manager_java_options = [\"-Xmx4g\", \"-XX:MaxHeapSize=268435456\"]"));
  }

  @Test
  void parse_warmUp_isOnByDefault_andCanBeTurnedOff() throws Exception {
    assertTrue(FlatpullConfig.parse("f", "").snapshotter().warmUp());
    assertFalse(FlatpullConfig.parse("f", "[snapshotter]\nwarm_up = false").snapshotter().warmUp());
    ConfigException e = assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("f", "[snapshotter]\nwarm_up = \"no\""));
    assertEquals("snapshotter.warm_up", e.key());
  }

  @Test
  void parse_wrongType_namesFileKeyAndReason() {
    ConfigException e = assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("flatpull.toml", "[registry]\nmax_attempts = \"three\"\n"));
    assertEquals("flatpull.toml", e.file());
    assertEquals("registry.max_attempts", e.key());
    assertTrue(e.getMessage().contains("must be an integer"), e.getMessage());
  }

  @Test
  void parse_unknownKey_isRefusedNotIgnored() {
    ConfigException e = assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("f.toml", "[registry]\nmax_atempts = 3\n"));
    assertEquals("registry.max_atempts", e.key());
    assertTrue(e.getMessage().contains("unknown key"), e.getMessage());
  }

  @Test
  void parse_badValues_areRefused() {
    assertEquals("registry.read_timeout",
        assertThrows(ConfigException.class, () -> FlatpullConfig.parse("f", "[registry]\nread_timeout = \"soon\"")).key());
    assertEquals("limits.max_chunk_size",
        assertThrows(ConfigException.class, () -> FlatpullConfig.parse("f", "[limits]\nmax_chunk_size = \"lots\"")).key());
    assertEquals("registry.max_concurrent_requests",
        assertThrows(ConfigException.class, () -> FlatpullConfig.parse("f", "[registry]\nmax_concurrent_requests = 0")).key());
    assertEquals("registry.max_backoff", assertThrows(ConfigException.class,
        () -> FlatpullConfig.parse("f", "[registry]\ninitial_backoff = \"5s\"\nmax_backoff = \"1s\"")).key());
  }

  @Test
  void parse_invalidToml_namesTheFile() {
    ConfigException e = assertThrows(ConfigException.class, () -> FlatpullConfig.parse("broken.toml", "root = = 1"));
    assertTrue(e.getMessage().startsWith("broken.toml: is not valid TOML"), e.getMessage());
  }

  @Test
  void load_missingFile_isAClearError() {
    ConfigException e = assertThrows(ConfigException.class, () -> FlatpullConfig.load(dir.resolve("nope.toml")));
    assertTrue(e.getMessage().contains("does not exist"), e.getMessage());
  }
}
