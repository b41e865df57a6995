package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Await;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.HostileLayers;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.manager.client.FuseManagerClient;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * Every hostile layer of the TOC readers' unit tests, and a valid layer whose one file lies 4,096 directories deep,
 * pushed to a real registry and mounted the two ways users mount: through {@code serve}'s FUSE manager (which must
 * refuse each with a clear error and keep serving its other layers) and with {@code flatpull mount} (which must exit
 * with the error, leaving no mount behind).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class HostileLayerIT {
  private static final int DEPTH = 4096;
  private static final byte[] DEEP_CONTENT = "at the bottom\n".getBytes(StandardCharsets.US_ASCII);

  private RegistryServer registry;
  private FlatpullDaemon flatpull;
  private FuseManagerClient manager;
  private Path work;
  private Path mountConfig;
  private final Map<String, byte[]> goodFiles = new LinkedHashMap<>();
  private Path good;
  private final Map<String, HostileLayers.Blob> pushed = new LinkedHashMap<>();
  private HostileLayers.Blob deep;

  @BeforeAll
  void setUp() throws Exception {
    registry = RegistryServer.shared();
    flatpull = FlatpullDaemon.start("", false, HostileLayers.LIMITS_TOML + engineToml());
    flatpull.awaitManager();
    manager = new FuseManagerClient(flatpull.managerSocket(), List.of(), flatpull.root().resolve("fuse-manager.log"));
    work = Files.createTempDirectory(Path.of("/var/tmp"), "fp-hostile-");
    mountConfig = work.resolve("mount.toml");
    Files.writeString(mountConfig, "root = \"" + work.resolve("root") + "\"\n[registry]\nplain_http = true\n"
        + "max_attempts = 1\n" + HostileLayers.LIMITS_TOML + engineToml());

    ByteArrayOutputStream tar = new ByteArrayOutputStream();
    for (int i = 0; i < 20; i++) {
      byte[] content = ("good file " + i + "\n").repeat(500 + i * 100).getBytes(StandardCharsets.US_ASCII);
      String name = "srv/file" + i + ".txt";
      goodFiles.put(name, content);
      TarWriter.writeEntry(tar, TarHeader.regular(name, content.length, 0644, Instant.EPOCH), content);
    }
    TarWriter.writeEnd(tar);
    HostileLayers.Blob goodLayer = HostileLayers.converted("good", tar.toByteArray(), work);
    String goodRef = push("good", goodLayer);
    // The FUSE manager mounts only inside its root.
    good = Files.createDirectories(flatpull.root().resolve("hostile/good"));
    manager.mount(good, goodRef, OciDocuments.writeDescriptor(goodLayer.descriptor()), Optional.empty());
    for (HostileLayers.Blob b : HostileLayers.refused()) {
      pushed.put(push(b.name(), b), b);
    }
    deep = HostileLayers.deep(DEPTH, DEEP_CONTENT, work);
    push("deep", deep);
  }

  /**
   * The FUSE configuration, none for the default; {@link HostileLayerLibfuseIT} names the other engine,
   * {@link HostileLayerPassthroughIT} passthrough.
   */
  String engineToml() {
    return "";
  }

  /** The engine the manager's mounts were configured with is the one that served them: no silent fallback. */
  @Test
  void theManagersMounts_areServedByTheConfiguredEngine() throws Exception {
    String log = Files.readString(flatpull.root().resolve("fuse-manager.log"));
    assertFalse(log.contains("cannot serve here"), log);
    assertEquals(!engineToml().contains("libfuse"), log.contains("kernel FUSE 7."), log);
    assertEquals(engineToml().contains("passthrough = true"), log.contains("passthrough yes"), log);
  }

  private String push(String name, HostileLayers.Blob b) throws IOException {
    String ref = registry.address() + "/hostile/" + name + ":1";
    ImagePusher.pushBlobs(ImageReference.parse(ref),
        List.of(new ImagePusher.Blob(b.bytes(), b.descriptor(), Digest.sha256(b.bytes()))));
    return ref;
  }

  @AfterAll
  void tearDown() throws Exception {
    if (manager != null) {
      manager.close();
    }
    if (flatpull != null) {
      flatpull.close();
    }
    if (registry != null) {
      registry.close();
    }
    if (work != null) {
      dev.flatpull.snapshotter.overlay.HostMounts.detachAllUnder(work);
      Processes.deleteTree(work);
    }
  }

  /** The good layer still serves: every file, read again through FUSE after the kernel dropped its copies. */
  private void assertGoodLayerServes(String after) throws Exception {
    Processes.dropCaches();
    for (Map.Entry<String, byte[]> f : goodFiles.entrySet()) {
      assertArrayEquals(f.getValue(), Files.readAllBytes(good.resolve(f.getKey())), f.getKey() + " after " + after);
    }
  }

  /** Reads the deep file with a shell that descends in steps (its whole path is longer than PATH_MAX). */
  private static String readDeep(Path mount) throws Exception {
    StringBuilder script = new StringBuilder("cd '" + mount + "'");
    for (int done = 0; done < DEPTH; done += 500) {
      script.append(" && cd -P ").append("d/".repeat(Math.min(500, DEPTH - done)));
    }
    script.append(" && cat f");
    Processes.Result r = Processes.run(List.of("sh", "-c", script.toString()), 60);
    assertEquals(0, r.exitCode(), r.stderr());
    return r.stdout();
  }

  @Test
  void fuseManager_refusesMountPointsOutsideItsRoot_directlyOrThroughASymlink() throws Exception {
    Path outside = Files.createDirectories(work.resolve("outside"));
    Path link = flatpull.root().resolve("hostile/link-out");
    Files.createDirectories(link.getParent());
    Files.createSymbolicLink(link, outside);
    String ref = pushed.keySet().iterator().next();
    for (Path at : List.of(outside, link, flatpull.root())) {
      IOException refused = assertThrows(IOException.class, () -> manager.mount(at, ref,
          OciDocuments.writeDescriptor(pushed.get(ref).descriptor()), Optional.empty()), at.toString());
      assertTrue(String.valueOf(refused.getMessage()).contains("outside the snapshotter's root"), refused.getMessage());
      assertFalse(LayerMount.isMounted(at), at + " mounted");
      IOException unmount = assertThrows(IOException.class, () -> manager.unmount(at), at.toString());
      assertTrue(String.valueOf(unmount.getMessage()).contains("outside the snapshotter's root"), unmount.getMessage());
    }
    assertGoodLayerServes("refused mount points");
  }

  @Test
  void fuseManager_refusesEveryHostileLayer_andKeepsServingItsOtherLayers() throws Exception {
    assertGoodLayerServes("mounting");
    int refused = 0;
    for (Map.Entry<String, HostileLayers.Blob> e : pushed.entrySet()) {
      HostileLayers.Blob b = e.getValue();
      Path at = Files.createDirectories(flatpull.root().resolve("hostile/manager-" + b.name()));
      IOException failure = assertThrows(IOException.class, () -> manager.mount(at, e.getKey(),
          OciDocuments.writeDescriptor(b.descriptor()), Optional.empty()), b.name());
      assertTrue(String.valueOf(failure.getMessage()).contains(b.refusal()),
          b.name() + ": '" + failure.getMessage() + "' should say '" + b.refusal() + "'");
      assertFalse(LayerMount.isMounted(at), b.name() + " left a mount");
      assertEquals(1, manager.status(10).getLayersCount(), b.name() + ": only the good layer is served");
      refused++;
    }
    assertGoodLayerServes("every hostile layer");
    System.out.printf("FUSE manager: %d hostile layers refused, the good layer served throughout%n", refused);
    assertEquals(HostileLayers.refused().size(), refused);
  }

  @Test
  void fuseManager_servesAFile4096DirectoriesDeep() throws Exception {
    Path at = Files.createDirectories(flatpull.root().resolve("hostile/manager-deep"));
    manager.mount(at, registry.address() + "/hostile/deep:1", OciDocuments.writeDescriptor(deep.descriptor()),
        Optional.empty());
    try {
      assertEquals(new String(DEEP_CONTENT, StandardCharsets.US_ASCII), readDeep(at));
      assertGoodLayerServes("the deep layer");
    } finally {
      manager.unmount(at);
    }
  }

  @Test
  void mountCommand_exitsWithTheErrorOnEveryHostileLayer_leavingNoMount() throws Exception {
    for (Map.Entry<String, HostileLayers.Blob> e : pushed.entrySet()) {
      HostileLayers.Blob b = e.getValue();
      Path at = work.resolve("cmd-" + b.name());
      Cli.Run r = Cli.launcher("--config", mountConfig.toString(), "mount", e.getKey(), at.toString());
      assertNotEquals(0, r.exitCode(), b.name() + " was mounted: " + r.stderr());
      assertTrue(r.stderr().contains(b.refusal()), b.name() + ": '" + r.stderr() + "' should say '" + b.refusal() + "'");
      assertFalse(r.stderr().contains("Exception in thread") || r.stderr().contains("\tat "),
          b.name() + " printed a stack trace: " + r.stderr());
      assertFalse(LayerMount.isMounted(at), b.name() + " left a mount");
    }
  }

  @Test
  void mountCommand_servesAFile4096DirectoriesDeep() throws Exception {
    Path at = work.resolve("cmd-deep");
    Path log = work.resolve("cmd-deep.log");
    Path launcher = Path.of(System.getProperty("flatpull.root", "..")).toAbsolutePath().normalize()
        .resolve("bin/flatpull");
    Process p = new ProcessBuilder(launcher.toString(), "--config", mountConfig.toString(), "mount",
        registry.address() + "/hostile/deep:1", at.toString())
        .redirectErrorStream(true).redirectOutput(log.toFile()).start();
    try {
      Await.until(Duration.ofSeconds(60), () -> {
        assertTrue(p.isAlive(), () -> "mount exited: " + read(log));
        return Cli.mountSaysMounted(Files.readString(log));
      }, () -> "mounted: " + read(log));
      assertEquals(new String(DEEP_CONTENT, StandardCharsets.US_ASCII), readDeep(at));
    } finally {
      p.destroy();
      assertTrue(p.waitFor(30, TimeUnit.SECONDS));
    }
    assertFalse(LayerMount.isMounted(at), "SIGTERM unmounts: " + read(log));
  }

  private static String read(Path log) {
    try {
      return Files.readString(log);
    } catch (IOException e) {
      return e.toString();
    }
  }
}
