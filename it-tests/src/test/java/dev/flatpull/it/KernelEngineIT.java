package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.FuseSettings;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * What the kernel engine negotiates and does that libfuse cannot, through a real mount: 1 MiB reads and readdirplus
 * in the kernel's INIT answer, a listing that brings its entries' attributes (no lookup follows it), and content
 * pushed into the kernel's page cache ({@code FUSE_NOTIFY_STORE}) read without a FUSE read, while content not pushed
 * still reaches the reader and the lazy layer behind it.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@org.junit.jupiter.api.TestMethodOrder(org.junit.jupiter.api.MethodOrderer.OrderAnnotation.class)
class KernelEngineIT {
  private static final int FILES = 40;
  /** The one file only its owner (root) may read. */
  private static final int SECRET = 5;
  private final Cleanup cleanup = new Cleanup();
  private byte[][] files;
  private LayerMount mount;
  private final AtomicInteger blobReads = new AtomicInteger();

  @BeforeAll
  void setUp() throws Exception {
    Processes.requireFuse();
    // Traversable by anyone: an unprivileged user reads through the mount inside it.
    Path work = cleanup.deleteLater(Files.createTempDirectory("flatpull-kernel-engine",
        java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
            java.nio.file.attribute.PosixFilePermissions.fromString("rwxr-xr-x"))));
    Random random = new Random(3);
    files = new byte[FILES][];
    for (int i = 0; i < FILES; i++) {
      // f0 a megabyte and a bit (its last page partial), the rest small.
      files[i] = new byte[i == 0 ? (1 << 20) + 1000 : 3000 + i];
      random.nextBytes(files[i]);
    }
    int[] modes = new int[FILES];
    Arrays.fill(modes, 0644);
    modes[SECRET] = 0600;
    InMemoryLayer layer = InMemoryLayer.estargz(LayerTar.numbered(modes, files), work);
    byte[] blob = layer.blob();
    BlobReader r = range -> {
      blobReads.incrementAndGet();
      return Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
    };
    LazyLayer lazy = new LazyLayer(EstargzToc.read(layer.descriptor(), r, FetchLimits.DEFAULTS), r, 64 << 10);
    PageCache cache = cleanup.add(PageCache.open(work.resolve("cache"), CacheSettings.DEFAULTS));
    mount = cleanup.add(LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
        new LayerContentReader(lazy, cache), FuseEvents.NONE), work.resolve("mnt"), FuseSettings.Engine.KERNEL));
  }

  @AfterAll
  void tearDown() throws Exception {
    cleanup.close();
  }

  /** The kernel checks the TOC's modes (default_permissions): an unprivileged user reads only what they allow. */
  @Test
  void anUnprivilegedUser_readsOnlyWhatTheModesAllow() throws Exception {
    java.util.function.Function<String, Processes.Result> hashAsNobody = name -> {
      try {
        return Processes.run(java.util.List.of("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sha256sum",
            mount.mountPoint().resolve(name).toString()), 30);
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    };
    Processes.Result secret = hashAsNobody.apply("f" + SECRET);
    assertTrue(secret.exitCode() != 0 && secret.stderr().contains("Permission denied"), secret.stderr());
    Processes.Result open = hashAsNobody.apply("f3");
    assertEquals(0, open.exitCode(), open.stderr());
    assertEquals(dev.flatpull.core.Digest.sha256(files[3]).hex(), open.stdout().split(" ")[0]);
  }

  @Test
  void theKernelsInitAnswer_grantsMegabyteReadsAndReaddirplus() {
    assertEquals(FuseSettings.Engine.KERNEL, mount.engine());
    String negotiated = mount.negotiated().orElseThrow();
    assertTrue(negotiated.contains("reads up to 1024 KiB"), negotiated);
    assertTrue(negotiated.contains("readdirplus yes"), negotiated);
    assertTrue(negotiated.contains("open without a round trip"), negotiated);
  }

  /** A close waits for no FLUSH: answered ENOSYS once, the kernel sends none again (nothing to flush read-only). */
  @Test
  void closes_sendAtMostOneFlush() throws Exception {
    for (int i = 10; i < 20; i++) {
      assertArrayEquals(files[i], Files.readAllBytes(mount.mountPoint().resolve("f" + i)));
    }
    assertTrue(mount.requests().get("flush") <= 1, mount.requests().toString());
  }

  /**
   * A layer without xattrs answers the first getxattr ENOSYS: the kernel answers every later one itself, as "not
   * supported", which overlayfs (its metacopy check of every file it looks up) and exec's capability check take for
   * "absent"; listing names still answers (none).
   */
  @Test
  void aLayerWithoutXattrs_isAskedForOneAtMostOnce() throws Exception {
    Processes.Result r = Processes.run(java.util.List.of("python3", "-c", String.join("\n",
        "import errno, os, sys",
        "for f in sys.argv[1:]:",
        "    try:",
        "        os.getxattr(f, 'trusted.overlay.metacopy')",
        "        print('found')",
        "    except OSError as e:",
        "        print('unsupported' if e.errno == errno.EOPNOTSUPP else errno.errorcode[e.errno])",
        "print(os.listxattr(sys.argv[1]))"),
        mount.mountPoint().resolve("f20").toString(), mount.mountPoint().resolve("f21").toString(),
        mount.mountPoint().resolve("f22").toString()), 30);
    assertEquals("unsupported\nunsupported\nunsupported\n[]", r.stdout().trim(), r.stderr());
    assertTrue(mount.requests().get("getxattr") <= 1, mount.requests().toString());
  }

  @Test
  void aListing_bringsItsEntriesAttributes_soNoLookupFollows() throws Exception {
    long readdirplus = mount.requests().get("readdirplus");
    long lookups;
    try (var names = Files.list(mount.mountPoint())) {
      lookups = mount.requests().get("lookup");
      int seen = 0;
      for (Path p : names.toList()) {
        Files.readAttributes(p, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        seen++;
      }
      assertEquals(FILES, seen);
    }
    assertTrue(mount.requests().get("readdirplus") > readdirplus, mount.requests().toString());
    assertEquals(lookups, mount.requests().get("lookup"), "stat after a listing: " + mount.requests());
  }

  @Test
  void contentStoredIntoTheKernel_isReadWithoutAFuseRead_andOtherContentStillReachesTheReader() throws Exception {
    Path big = mount.mountPoint().resolve("f0");
    // The kernel must know the file: looked up, not read.
    Files.readAttributes(big, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
    long pagesBefore = mount.pagesStored();
    assertEquals(files[0].length, mount.store("f0", 0, files[0]), "every byte, the partial last page too");
    assertEquals((files[0].length + 4095) / 4096, mount.pagesStored() - pagesBefore);
    long reads = mount.requests().get("read");
    int fetches = blobReads.get();
    assertArrayEquals(files[0], Files.readAllBytes(big));
    assertEquals(reads, mount.requests().get("read"), "served by the kernel: " + mount.requests());
    assertEquals(fetches, blobReads.get(), "and nothing fetched");

    Path other = mount.mountPoint().resolve("f7");
    assertArrayEquals(files[7], Files.readAllBytes(other));
    assertTrue(mount.requests().get("read") > reads, "content not stored is read through FUSE");
    assertTrue(blobReads.get() > fetches, "from the lazy layer");
  }

  @Test
  @org.junit.jupiter.api.Order(1) // before the listing, whose readdirplus makes every file known to the kernel
  void storingAFileTheKernelHasNotLookedUp_storesNothing_andItIsReadAsUsual() throws Exception {
    assertEquals(0, mount.store("f9", 0, files[9]), "the kernel has no inode for it");
    assertEquals(0, mount.store("absent", 0, files[9]), "no such file in the layer");
    long reads = mount.requests().get("read");
    assertArrayEquals(files[9], Files.readAllBytes(mount.mountPoint().resolve("f9")));
    assertTrue(mount.requests().get("read") > reads);
  }
}
