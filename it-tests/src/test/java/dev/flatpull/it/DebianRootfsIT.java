package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.FuseSettings;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.fetcher.layer.KeptIndexes;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A real Debian root file system in two layers, converted to eStargz and zstd:chunked, mounted layer by layer with
 * FUSE and stacked with overlayfs, is identical to what {@code umoci unpack} makes of the same image: every entry's
 * type, bits, owner, size, bytes, mtime, link target, device numbers, user xattrs and hard-link identity, and the
 * upper layer's whiteouts and opaque directory.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class DebianRootfsIT {
  private RegistryServer registry;
  private Path work;
  private TreeSnapshot reference;
  private final List<Path> overlays = new ArrayList<>();
  private final List<LayerMount> mounts = new ArrayList<>();
  private final List<RegistryClients> servingClients = new ArrayList<>();
  private final List<PageCache> caches = new ArrayList<>();

  @BeforeAll
  void setUp() throws Exception {
    Processes.requireFuse();
    Path skopeo = Processes.require("skopeo");
    Path umoci = Processes.require("umoci");
    registry = RegistryServer.start();
    ImageReference plain = DebianImage.push(registry.address(), "it/debian", "plain");
    work = Files.createTempDirectory("flatpull-debian");
    Processes.run(List.of(skopeo.toString(), "copy", "--src-tls-verify=false", "docker://" + plain,
        "oci:" + work.resolve("oci") + ":plain"), 300).orThrow(List.of("skopeo copy"));
    Processes.run(List.of(umoci.toString(), "unpack", "--image", work.resolve("oci") + ":plain",
        work.resolve("bundle").toString()), 300).orThrow(List.of("umoci unpack"));
    reference = TreeSnapshot.of(work.resolve("bundle/rootfs"));
    for (String format : List.of("estargz", "zstd-chunked")) {
      Cli.Run c = Cli.inProcess("convert", "--plain-http", "--quiet", "--format", format, "--level", "1",
          plain.toString(), registry.address() + "/it/debian:" + format);
      assertEquals(0, c.exitCode(), c.stderr());
    }
  }

  /** The engine every mount of this suite takes; {@link DebianRootfsLibfuseIT} runs it on the other one. */
  FuseSettings.Engine engine() {
    return LayerMount.DEFAULT_ENGINE;
  }

  @AfterAll
  void tearDown() throws Exception {
    for (Path o : overlays) {
      Processes.run(List.of("umount", o.toString()), 30);
    }
    for (LayerMount m : mounts) {
      m.close();
    }
    for (RegistryClients c : servingClients) {
      c.close();
    }
    for (PageCache c : caches) {
      c.close();
    }
    if (registry != null) {
      registry.close();
    }
    if (work != null) {
      Processes.deleteTree(work);
    }
  }

  /**
   * Mounts the image {@code tag} names, each layer's index from its TOC or, with {@code fromKeptIndexes}, from the
   * index file an earlier open of the layer kept in the page cache's directory.
   */
  private Path mountImage(String tag, boolean fromKeptIndexes) throws Exception {
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    String name = tag + (fromKeptIndexes ? "-kept" : "");
    PageCache cache = PageCache.open(work.resolve("cache-" + name),
        new CacheSettings(Optional.empty(), 64L << 20, 4L << 30, Duration.ofSeconds(10)));
    caches.add(cache);
    ImageReference ref = ImageReference.parse(registry.address() + "/it/debian:" + tag);
    List<String> lower = new ArrayList<>();
    // The mounts read through these clients until tearDown closes them.
    RegistryClients clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE,
        Sleeper.SYSTEM, InstantSource.system());
    servingClients.add(clients);
    RegistryClient client = clients.client(ref);
    List<Descriptor> layers = client.resolve(ref, Platform.current()).manifest().layers();
    LayerOpener opener = new LayerOpener(client, config, work.resolve("layers-" + name))
        .keepingIndexes(new KeptIndexes(cache.namedFiles(), Runnable::run));
    if (fromKeptIndexes) {
      for (Descriptor d : layers) {
        assertFalse(opener.open(d).index().fromKeptFile(), "the first open of a layer reads its TOC");
      }
    }
    for (int i = 0; i < layers.size(); i++) {
      LazyLayer lazy = opener.open(layers.get(i));
      assertEquals(fromKeptIndexes, lazy.index().fromKeptFile(), "layer " + i + " opened from its kept index file");
      LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
          new LayerContentReader(lazy, cache), FuseEvents.NONE), work.resolve(name + "-layer" + i), engine());
      mounts.add(m);
      assertEquals(engine(), m.engine(), "no fallback");
      lower.add(0, m.mountPoint().toString());
    }
    Path merged = Files.createDirectories(work.resolve(name + "-merged"));
    Processes.run(List.of("mount", "-t", "overlay", "overlay", "-o", "ro,lowerdir=" + String.join(":", lower),
        merged.toString()), 30).orThrow(List.of("mount -t overlay"));
    overlays.add(merged);
    return merged;
  }

  @ParameterizedTest
  @ValueSource(strings = {"estargz", "zstd-chunked"})
  void mountedImage_isIdenticalToUmociUnpack(String tag) throws Exception {
    assertTrue(reference.size() > 3000, "a real root file system: " + reference.size() + " entries");
    assertTrue(reference.get("dev/null") != null && reference.get("dev/null").contains("type=20000"), "device nodes");
    assertEquals(null, reference.get("etc/motd"), "the upper layer deletes /etc/motd");
    assertEquals(null, reference.get("var/log/apt"), "and /var/log/apt");
    assertTrue(reference.get("usr/local/bin/hello").contains("user.flatpull.note="), reference.get("usr/local/bin/hello"));
    TreeSnapshot mounted = TreeSnapshot.of(mountImage(tag, false));
    List<String> diff = reference.differences(mounted, 20);
    assertTrue(diff.isEmpty(), diff.size() + "+ differences, first ones:\n" + String.join("\n", diff));
  }

  /** The same image mounted a second time on the node: every layer's index read from its kept file, not its TOC. */
  @ParameterizedTest
  @ValueSource(strings = {"estargz", "zstd-chunked"})
  void mountedFromKeptIndexFiles_isIdenticalToUmociUnpack(String tag) throws Exception {
    TreeSnapshot mounted = TreeSnapshot.of(mountImage(tag, true));
    List<String> diff = reference.differences(mounted, 20);
    assertTrue(diff.isEmpty(), diff.size() + "+ differences, first ones:\n" + String.join("\n", diff));
  }
}
