package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.FuseSettings;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.RequestKind;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * Real FUSE mounts of layers served lazily from a real registry: the mounted tree equals the layer index, metadata
 * operations issue no registry request, a read fetches only the chunks that cover it, and the layers stacked with
 * overlayfs show the image's merged view (whiteouts honoured).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@org.junit.jupiter.api.TestMethodOrder(org.junit.jupiter.api.MethodOrderer.OrderAnnotation.class)
class FuseMountIT {
  private final Cleanup cleanup = new Cleanup();
  private RegistryServer registry;
  private TestImage image;
  private RegistryClients clients;
  private final FetchStatistics stats = new FetchStatistics();
  private final List<LayerMount> mounts = new ArrayList<>();
  private final List<LazyLayer> layers = new ArrayList<>();
  private Path work;
  private Path merged;
  private PageCache cache;

  @BeforeAll
  void setUp() throws Exception {
    Processes.requireFuse();
    registry = cleanup.add(RegistryServer.shared());
    image = TestImage.push(registry, "it/fuse", "plain");
    String esgz = registry.address() + "/it/fuse:esgz";
    Cli.Run c = Cli.inProcess("convert", "--plain-http", "--chunk-size", "262144", image.reference.toString(), esgz);
    assertEquals(0, c.exitCode(), c.stderr());
    work = cleanup.deleteLater(Files.createTempDirectory("flatpull-fuse"));
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    clients = cleanup.add(new RegistryClients(config, RegistryCredentials.NONE, stats, Sleeper.SYSTEM, InstantSource.system()));
    ImageReference ref = ImageReference.parse(esgz);
    RegistryClient client = clients.client(ref);
    List<Descriptor> descriptors = client.resolve(ref, Platform.current()).manifest().layers();
    cache = cleanup.add(PageCache.open(work.resolve("cache"),
        new CacheSettings(Optional.empty(), 64L << 20, 1L << 30, Duration.ofSeconds(10))));
    LayerOpener opener = new LayerOpener(client, config, work.resolve("layers"));
    for (int i = 0; i < descriptors.size(); i++) {
      LazyLayer layer = opener.open(descriptors.get(i));
      layers.add(layer);
      LayerFileSystem fs = new LayerFileSystem(LayerTree.of(layer.index()), new LayerContentReader(layer, cache), FuseEvents.NONE);
      LayerMount m = cleanup.add(LayerMount.mount(fs, work.resolve("layer" + i), engine()));
      assertEquals(engine(), m.engine(), "no fallback");
      mounts.add(m);
    }
    merged = Files.createDirectories(work.resolve("merged"));
    String lower = mounts.get(1).mountPoint() + ":" + mounts.get(0).mountPoint();
    Processes.run(List.of("mount", "-t", "overlay", "overlay", "-o", "lowerdir=" + lower, merged.toString()), 30)
        .orThrow(List.of("mount", "-t", "overlay"));
    Path overlay = merged;
    cleanup.add(() -> Processes.run(List.of("umount", overlay.toString()), 30));
  }

  /** The engine every mount of this suite takes; {@link FuseMountLibfuseIT} runs it on the other one. */
  FuseSettings.Engine engine() {
    return LayerMount.DEFAULT_ENGINE;
  }

  @AfterAll
  void tearDown() throws Exception {
    cleanup.close();
  }


  /** The FUSE manager's warm-up (a synthetic image through loopback HTTP, TOCs, tree, a real mount, reads). */
  @Test
  void warmUp_runsTheWholeColdPathThroughARealMount_andLeavesNothingBehind() throws Exception {
    Path dir = Files.createTempDirectory("flatpull-warm-up").resolve("w");
    dev.flatpull.snapshotter.warmup.WarmUp.run(dir, java.time.InstantSource.system()); // throws when any step fails
    assertFalse(Files.exists(dir));
    assertEquals(List.of(), dev.flatpull.core.MountTable.under(dir));
    Files.delete(dir.getParent());
  }

  /**
   * The second part: the manager's gRPC service on a throwaway server, mount with the manifest, which finds the image's
   * runtime image and streams it into the page cache and the kernel's, the files read, unmount, the cache emptied.
   */
  @Test
  void warmUpOfTheService_streamsItsRuntimeImageEveryRound_throughTheRealService_andLeavesNothingBehind()
      throws Exception {
    Path dir = Files.createTempDirectory("flatpull-warm-up").resolve("s");
    var streamed = dev.flatpull.snapshotter.warmup.WarmUp.service(dir, "test", System::nanoTime,
        java.time.InstantSource.system());
    assertEquals(3, streamed.rounds());
    // Every round brings the whole runtime image again (the cache was emptied): hundreds of contents, so that the
    // compiler has seen each per-content path as often as a start does.
    assertTrue(streamed.contents().get(0) > 500, streamed.toString());
    assertEquals(List.of(streamed.contents().get(0), streamed.contents().get(0), streamed.contents().get(0)),
        streamed.contents());
    assertTrue(streamed.kernelPages() > 0, "content landed in the kernel: " + streamed);
    assertFalse(Files.exists(dir));
    assertEquals(List.of(), dev.flatpull.core.MountTable.under(dir));
    Files.delete(dir.getParent());
  }

  @Test
  void mountedLayer_matchesItsIndexEntryForEntry() throws Exception {
    for (int i = 0; i < layers.size(); i++) {
      Path root = mounts.get(i).mountPoint();
      for (LayerEntry e : layers.get(i).index().entries()) {
        if (e.isOpaqueMarker()) {
          continue;
        }
        String name = e.isWhiteout() ? e.parent() + "/" + e.baseName().substring(4) : e.name();
        Path p = root.resolve(name);
        assertTrue(Files.exists(p, LinkOption.NOFOLLOW_LINKS), "missing " + p);
        Map<String, Object> a = Files.readAttributes(p, "unix:mode,uid,gid,size,rdev", LinkOption.NOFOLLOW_LINKS);
        int mode = (Integer) a.get("mode");
        if (e.isWhiteout()) {
          assertEquals(0020000, mode & 0170000, "whiteout " + name + " is a character device");
          assertEquals(0L, a.get("rdev"), "whiteout device is 0:0");
          continue;
        }
        LayerEntry content = layers.get(i).index().contentOf(e);
        int type = switch (content.type()) {
          case DIR -> 0040000;
          case REG -> 0100000;
          case SYMLINK -> 0120000;
          case CHAR -> 0020000;
          case BLOCK -> 0060000;
          case FIFO -> 0010000;
          case HARDLINK -> -1;
        };
        assertEquals(type, mode & 0170000, "type of " + name);
        if (content.type() != EntryType.SYMLINK) {
          assertEquals(content.mode(), mode & 07777, "mode of " + name);
        }
        assertEquals(content.uid(), a.get("uid"), "uid of " + name);
        if (content.type() == EntryType.REG) {
          assertEquals(content.size(), a.get("size"), "size of " + name);
        }
        if (content.type() == EntryType.SYMLINK) {
          assertEquals(content.linkName(), Files.readSymbolicLink(p).toString());
        }
      }
    }
  }

  @Test
  @org.junit.jupiter.api.Order(2)
  void statAndReaddirOfTheWholeTree_issueNoRegistryRequest() throws Exception {
    long before = stats.totalRequests();
    int seen = 0;
    for (LayerMount m : mounts) {
      try (var walk = Files.walk(m.mountPoint())) {
        for (Path p : walk.toList()) {
          Files.readAttributes(p, "unix:mode,size,ino", LinkOption.NOFOLLOW_LINKS);
          seen++;
        }
      }
    }
    assertTrue(seen > 60, "walked " + seen);
    assertEquals(before, stats.totalRequests());
  }

  @Test
  @org.junit.jupiter.api.Order(1) // before any other test reads (and caches) the file
  void readingOneSmallFile_fetchesOnlyItsChunk() throws Exception {
    long requests = stats.requests(RequestKind.BLOB_RANGE);
    long bytes = stats.bytes(RequestKind.BLOB_RANGE);
    byte[] got = Files.readAllBytes(mounts.get(0).mountPoint().resolve("etc/java/security/java.policy"));
    assertArrayEquals(image.files.get("etc/java/security/java.policy"), got);
    assertEquals(requests + 1, stats.requests(RequestKind.BLOB_RANGE));
    assertTrue(stats.bytes(RequestKind.BLOB_RANGE) - bytes < 64 * 1024, "one small chunk");
  }

  @Test
  void hardLinks_shareOneInode() throws Exception {
    Path lib = mounts.get(0).mountPoint().resolve("usr/lib/jvm/lib");
    Object a = Files.getAttribute(lib.resolve("libjava.so"), "unix:ino");
    Object b = Files.getAttribute(lib.resolve("libjava-hard.so"), "unix:ino");
    assertEquals(a, b);
    assertEquals(2, Files.getAttribute(lib.resolve("libjava.so"), "unix:nlink"));
  }

  /**
   * A layer without xattrs has the kernel answer "not supported" (told once, it asks no more), which overlayfs takes
   * for "absent" as it does ENODATA; a layer with some answers ENODATA for an absent one (the hostile layer's test).
   */
  @Test
  void absentXattr_onALayerWithoutAny_isNotSupported() {
    String reason = absentXattrError(mounts.get(0).mountPoint().resolve("etc/hostname"));
    assertTrue(reason.endsWith(": Operation not supported"), reason);
  }

  private static String absentXattrError(Path file) {
    var view = Files.getFileAttributeView(file, java.nio.file.attribute.UserDefinedFileAttributeView.class);
    java.nio.file.FileSystemException e = org.junit.jupiter.api.Assertions.assertThrows(
        java.nio.file.FileSystemException.class, () -> view.read("absent", java.nio.ByteBuffer.allocate(16)));
    return String.valueOf(e.getReason());
  }

  @Test
  void overlayOfTheLayers_showsTheImage() throws Exception {
    for (Map.Entry<String, byte[]> f : image.files.entrySet()) {
      assertArrayEquals(f.getValue(), Files.readAllBytes(merged.resolve(f.getKey())), f.getKey());
    }
    for (String gone : image.deleted) {
      assertFalse(Files.exists(merged.resolve(gone), LinkOption.NOFOLLOW_LINKS), gone + " is whited out");
      Path parent = merged.resolve(gone).getParent();
      try (var listing = Files.list(parent)) {
        String name = merged.resolve(gone).getFileName().toString();
        assertFalse(listing.anyMatch(p -> p.getFileName().toString().equals(name)),
            gone + " is not listed either (readdir must give overlayfs the whiteout's type)");
      }
    }
    assertEquals("upper\n", Files.readString(merged.resolve("etc/motd"), StandardCharsets.US_ASCII));
  }

  @Test
  void writes_areRefusedOnTheReadOnlyMount() {
    Path p = mounts.get(0).mountPoint().resolve("etc/hostname");
    assertTrue(org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class,
        () -> Files.writeString(p, "x")).getMessage().contains("Read-only"));
    Set<PosixFilePermission> none = PosixFilePermissions.fromString("---------");
    org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class, () -> Files.setPosixFilePermissions(p, none));
  }

  /**
   * A layer whose TOC carries {@code trusted.overlay.*} attributes itself: through its FUSE mount they are not there
   * (overlayfs acts on them), its own {@code user.*} ones are; the mount is {@code nosuid,nodev} by flatpull's own
   * options.
   */
  @Test
  void aLayersOwnTrustedXattrs_areNotVisibleThroughItsMount_andTheMountIsNosuidNodev() throws Exception {
    java.io.ByteArrayOutputStream tar = new java.io.ByteArrayOutputStream();
    dev.flatpull.fetcher.tar.TarWriter.writeHeader(tar, new dev.flatpull.fetcher.tar.TarHeader("srv/",
        dev.flatpull.fetcher.tar.TarHeader.DIR, 0, 0755, 0, 0, "", "", java.time.Instant.EPOCH, "", 0, 0,
        Map.of("trusted.overlay.opaque", "y".getBytes(StandardCharsets.US_ASCII),
            "user.kept", "k".getBytes(StandardCharsets.US_ASCII))));
    dev.flatpull.fetcher.tar.TarWriter.writeEnd(tar);
    Path file = work.resolve("hostile.tar");
    Files.write(file, tar.toByteArray());
    Descriptor d = new Descriptor(dev.flatpull.fetcher.oci.MediaTypes.OCI_LAYER,
        dev.flatpull.core.Digest.sha256(tar.toByteArray()), tar.size(), Map.of());
    LazyLayer lazy = dev.flatpull.fetcher.layer.PlainLayerIndexer.open(d, file, file,
        dev.flatpull.config.FetchLimits.DEFAULTS);
    LayerMount m = cleanup.add(LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
        new LayerContentReader(lazy, cache), FuseEvents.NONE), work.resolve("hostile"), engine()));
    Processes.Result x = Processes.run(List.of("python3", "-c",
        "import os, sys; print(sorted(os.listxattr(sys.argv[1])))", m.mountPoint().resolve("srv").toString()), 30);
    assertEquals("['user.kept']", x.stdout().trim(), x.stderr());
    String absent = absentXattrError(m.mountPoint().resolve("srv"));
    assertTrue(absent.endsWith(": No data available"), absent);
    for (Path mountPoint : List.of(m.mountPoint(), mounts.get(0).mountPoint())) {
      String line = Files.readAllLines(Path.of("/proc/self/mountinfo")).stream()
          .filter(l -> l.split(" ")[4].equals(mountPoint.toString())).findFirst().orElseThrow();
      List<String> options = List.of(line.split(" ")[5].split(","));
      assertTrue(options.containsAll(List.of("ro", "nosuid", "nodev")), line);
    }
  }
}
