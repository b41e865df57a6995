package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
import dev.flatpull.fuse.BackingFiles;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A real Debian root file system in two layers, converted to eStargz and zstd:chunked, mounted layer by layer with
 * FUSE (on each engine) and stacked with overlayfs, is identical to what {@code umoci unpack} makes of the same
 * image: every entry's type, bits, owner, size, bytes, mtime, link target, device numbers, user xattrs and hard-link
 * identity, and the upper layer's whiteouts and opaque directory. The image is built and converted once for all.
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
    registry = RegistryServer.shared();
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

  /** Each engine with each format: both engines show a real root file system exactly. */
  static Stream<Arguments> enginesAndFormats() {
    return Stream.of(FuseSettings.Engine.values()).flatMap(e -> Stream.of("estargz", "zstd-chunked")
        .map(f -> Arguments.of(e, f)));
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

  /** A page cache of its own, named {@code name}: its content and its kept index files. */
  private PageCache cacheFor(String name) throws IOException {
    PageCache cache = PageCache.open(work.resolve("cache-" + name),
        new CacheSettings(Optional.empty(), 64L << 20, 4L << 30, Duration.ofSeconds(10)));
    caches.add(cache);
    return cache;
  }

  /**
   * Mounts the image {@code tag} names on {@code engine} over {@code cache}, each layer's index from its TOC or, with
   * {@code fromKeptIndexes}, from the index file the earlier mount kept in the page cache's directory.
   */
  private Path mountImage(FuseSettings.Engine engine, String tag, PageCache cache, boolean fromKeptIndexes)
      throws Exception {
    return mountImage(engine, tag, cache, fromKeptIndexes, BackingFiles.NONE, "");
  }

  private Path mountImage(FuseSettings.Engine engine, String tag, PageCache cache, boolean fromKeptIndexes,
      BackingFiles backing, String suffix) throws Exception {
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    String name = engine.configName() + "-" + tag + (fromKeptIndexes ? "-kept" : "") + suffix;
    ImageReference ref = ImageReference.parse(registry.address() + "/it/debian:" + tag);
    List<String> lower = new ArrayList<>();
    // The mounts read through these clients until tearDown closes them.
    RegistryClients clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE,
        Sleeper.SYSTEM, InstantSource.system());
    servingClients.add(clients);
    RegistryClient client = clients.client(ref);
    List<Descriptor> layers = client.resolve(ref, Platform.current()).manifest().layers();
    LayerOpener opener = new LayerOpener(client, config, work.resolve("layers-" + name))
        .keepingIndexes(new KeptIndexes(cache.namedFiles(), KeptIndexes.AT_ONCE));
    for (int i = 0; i < layers.size(); i++) {
      LazyLayer lazy = opener.open(layers.get(i));
      assertEquals(fromKeptIndexes, lazy.index().fromKeptFile(), "layer " + i + " opened from its kept index file");
      LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
          new LayerContentReader(lazy, cache), FuseEvents.NONE), work.resolve(name + "-layer" + i), engine, backing, 0);
      mounts.add(m);
      assertEquals(engine, m.engine(), "no fallback");
      lower.add(0, m.mountPoint().toString());
    }
    Path merged = Files.createDirectories(work.resolve(name + "-merged"));
    Processes.run(List.of("mount", "-t", "overlay", "overlay", "-o", "ro,lowerdir=" + String.join(":", lower),
        merged.toString()), 30).orThrow(List.of("mount -t overlay"));
    overlays.add(merged);
    return merged;
  }

  /**
   * The image read through passthrough: mounted with backing files (of every size), read whole once (lazily, through
   * FUSE reads, each file given its backing file as it is closed complete), then read again with the kernel's caches
   * dropped, from the backing files. Both reads are the root file system, entry by entry.
   */
  @org.junit.jupiter.api.Test
  void readThroughPassthrough_isIdenticalToUmociUnpack() throws Exception {
    PageCache cache = cacheFor("passthrough");
    BackingFiles backing = new BackingFiles(cache, 1, Runnable::run, () -> true);
    int first = mounts.size();
    Path merged = mountImage(FuseSettings.Engine.KERNEL, "estargz", cache, false, backing, "-passthrough");
    List<String> diff = reference.differences(TreeSnapshot.of(merged), 20);
    assertTrue(diff.isEmpty(), diff.size() + "+ differences, first ones:\n" + String.join("\n", diff));
    assertTrue(backing.stats().assembled() > 1000, backing.stats().toString());
    Processes.dropCaches();
    long before = mounts.subList(first, mounts.size()).stream().mapToLong(LayerMount::passthroughOpens).sum();
    diff = reference.differences(TreeSnapshot.of(merged), 20);
    assertTrue(diff.isEmpty(), "through passthrough: " + diff.size() + "+ differences, first ones:\n"
        + String.join("\n", diff));
    long opens = mounts.subList(first, mounts.size()).stream().mapToLong(LayerMount::passthroughOpens).sum() - before;
    assertTrue(opens > 1000, "files read through passthrough: " + opens);
  }

  /**
   * The image as mounted on a node that never saw it, and again as a second mount on the same node reads it: every
   * layer's index from the file the first mount kept, not from its TOC, and the content from the page cache.
   */
  @ParameterizedTest
  @MethodSource("enginesAndFormats")
  void mountedImage_isIdenticalToUmociUnpack_andSoIsItsRemountFromKeptIndexFiles(FuseSettings.Engine engine, String tag)
      throws Exception {
    assertTrue(reference.size() > 3000, "a real root file system: " + reference.size() + " entries");
    assertTrue(reference.get("dev/null") != null && reference.get("dev/null").contains("type=20000"), "device nodes");
    assertEquals(null, reference.get("etc/motd"), "the upper layer deletes /etc/motd");
    assertEquals(null, reference.get("var/log/apt"), "and /var/log/apt");
    assertTrue(reference.get("usr/local/bin/hello").contains("user.flatpull.note="), reference.get("usr/local/bin/hello"));
    PageCache cache = cacheFor(engine.configName() + "-" + tag);
    TreeSnapshot mounted = TreeSnapshot.of(mountImage(engine, tag, cache, false));
    List<String> diff = reference.differences(mounted, 20);
    assertTrue(diff.isEmpty(), diff.size() + "+ differences, first ones:\n" + String.join("\n", diff));

    TreeSnapshot remounted = TreeSnapshot.of(mountImage(engine, tag, cache, true));
    diff = reference.differences(remounted, 20);
    assertTrue(diff.isEmpty(), "remounted from kept index files: " + diff.size() + "+ differences, first ones:\n"
        + String.join("\n", diff));
  }
}
