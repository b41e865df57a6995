package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.UserDefinedFileAttributeView;
import java.time.Duration;
import java.time.Instant;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * zstd:chunked as the real producer writes it: a tree of every entry type is made into an OCI image, pushed with
 * Debian's {@code skopeo copy --dest-compress-format zstd:chunked} (containers/storage 1.43's compressor:
 * {@code endOffset} on a file's entry only, content-defined chunks, no tar-split), and read by flatpull lazily,
 * through {@code cat} and through a FUSE mount, exactly as the source tree is.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SkopeoZstdChunkedIT {
  private static final Instant MTIME = Instant.parse("2024-05-01T10:20:30Z");
  private final ObjectMapper json = new ObjectMapper();
  private RegistryServer registry;
  private Path work;
  private Path src;
  private String ref;
  private final List<String> regularFiles = new ArrayList<>();
  private LayerMount mount;
  private RegistryClients servingClients;
  private PageCache cache;

  @BeforeAll
  void setUp() throws Exception {
    Processes.requireFuse();
    Processes.require("skopeo");
    registry = RegistryServer.shared();
    work = Files.createTempDirectory("flatpull-skopeo");
    src = Files.createDirectories(work.resolve("src"));
    makeTree();
    Path tar = work.resolve("layer.tar");
    Processes.run(List.of("tar", "--xattrs", "--numeric-owner", "-cf", tar.toString(), "-C", src.toString(), "."), 120)
        .orThrow(List.of("tar"));
    Path layout = OciLayout.write(work.resolve("oci"), "src", List.of(Files.readAllBytes(tar)));
    ref = registry.address() + "/it/skopeo:zstd-chunked";
    Skopeo.copy(List.of("--dest-tls-verify=false", "--dest-compress-format", "zstd:chunked", "oci:" + layout + ":src",
        "docker://" + ref), 300);
  }

  /** A 3 MB random file, a 5 MB file of zeros, a file of data and zeros, 300 small files, and every other entry type. */
  private void makeTree() throws Exception {
    Random r = new Random(39);
    byte[] random = new byte[3_000_000];
    r.nextBytes(random);
    file("random", random);
    file("zeros", new byte[5_000_000]);
    byte[] holes = new byte[400_000];
    r.nextBytes(holes);
    java.util.Arrays.fill(holes, 100_000, 300_000, (byte) 0);
    file("holes", holes);
    for (int i = 0; i < 300; i++) {
      file("small/f" + i, ("small file " + i + "\n").repeat(1 + i % 7).getBytes(StandardCharsets.UTF_8));
    }
    file("a/b/c/d/deep", "four directories down\n".getBytes(StandardCharsets.UTF_8));
    file("empty", new byte[0]);
    Path suid = file("bin/suid", "#!/bin/sh\n".getBytes(StandardCharsets.UTF_8));
    Processes.run(List.of("chmod", "4755", suid.toString()), 10).orThrow(List.of("chmod"));
    Path owned = file("owned", "someone else's\n".getBytes(StandardCharsets.UTF_8));
    Processes.run(List.of("chown", "1234:5678", owned.toString()), 10).orThrow(List.of("chown"));
    UserDefinedFileAttributeView x = Files.getFileAttributeView(owned, UserDefinedFileAttributeView.class);
    x.write("flatpull.note", ByteBuffer.wrap("kept".getBytes(StandardCharsets.UTF_8)));
    Files.createSymbolicLink(src.resolve("link"), Path.of("small/f1"));
    Files.createLink(src.resolve("random-again"), src.resolve("random"));
    Processes.run(List.of("mkfifo", src.resolve("fifo").toString()), 10).orThrow(List.of("mkfifo"));
    Processes.run(List.of("mknod", src.resolve("null").toString(), "c", "1", "3"), 10).orThrow(List.of("mknod"));
    // touch sets times by path: opening a fifo to set them would wait for a writer.
    Processes.run(List.of("find", src.toString(), "-exec", "touch", "-h", "-d", MTIME.toString(), "{}", "+"), 60)
        .orThrow(List.of("touch"));
  }

  private Path file(String name, byte[] content) throws Exception {
    Path p = src.resolve(name);
    Files.createDirectories(p.getParent());
    Files.write(p, content);
    regularFiles.add(name);
    return p;
  }

  @AfterAll
  void tearDown() throws Exception {
    if (mount != null) {
      mount.close();
    }
    if (servingClients != null) {
      servingClients.close();
    }
    if (cache != null) {
      cache.close();
    }
    if (registry != null) {
      registry.close();
    }
    if (work != null) {
      Processes.deleteTree(work);
    }
  }

  private JsonNode layer() throws Exception {
    Cli.Run r = Cli.inProcess("inspect", "--plain-http", "--json", ref);
    assertEquals(0, r.exitCode(), r.stderr());
    JsonNode layers = json.readTree(r.stdout()).get("layers");
    assertEquals(1, layers.size());
    return layers.get(0);
  }

  @Test
  void skopeosLayer_isZstdChunked_withTheLayoutFlatpullOnceRefused() throws Exception {
    JsonNode l = layer();
    assertEquals("zstd:chunked", l.get("format").asText(), l.toString());
    assertTrue(l.get("annotations").has("io.containers.zstd-chunked.manifest-checksum"),
        "Debian's skopeo writes containers/storage 1.43's annotations: " + l);
    assertFalse(l.get("tarSplitChecked").asBoolean(), "and no tar-split");
  }

  /**
   * Debian's skopeo drops the tar's two trailing zero blocks when it compresses and keeps the config's diff_id:
   * {@code inspect --verify} downloads the layer whole and says so, loudly, with exit 1.
   */
  @Test
  void inspectVerify_saysTheLayersDiffIdDoesNotMatchItsConfig() throws Exception {
    Cli.Run r = Cli.inProcess("inspect", "--plain-http", "--verify", "--json", ref);
    assertEquals(1, r.exitCode(), r.stderr());
    assertTrue(r.stderr().contains("MISMATCH") && r.stderr().contains(layer().get("digest").asText()), r.stderr());
    JsonNode l = json.readTree(r.stdout()).get("layers").get(0);
    assertFalse(l.get("diffIdMatches").asBoolean(), l.toString());
  }

  @Test
  void everyFile_readThroughCat_isTheSourceFile() throws Exception {
    for (String name : regularFiles) {
      Cli.Run r = Cli.inProcess("cat", "--plain-http", ref, "/" + name);
      assertEquals(0, r.exitCode(), name + ": " + r.stderr());
      assertArrayEquals(Files.readAllBytes(src.resolve(name)), r.stdout(), name);
    }
    Cli.Run link = Cli.inProcess("cat", "--plain-http", ref, "/random-again");
    assertArrayEquals(Files.readAllBytes(src.resolve("random")), link.stdout(), "a hard link reads its target");
  }

  @Test
  void oneSmallFile_ofALayerOfSeveralMegabytes_movesLessThanOneMegabyte() throws Exception {
    List<String> warnings = new java.util.concurrent.CopyOnWriteArrayList<>();
    java.util.logging.Logger opener = java.util.logging.Logger.getLogger(LayerOpener.class.getName());
    java.util.logging.Handler capture = new java.util.logging.Handler() {
      @Override
      public void publish(java.util.logging.LogRecord record) {
        if (record.getLevel() == java.util.logging.Level.WARNING) {
          warnings.add(record.getMessage());
        }
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    opener.addHandler(capture);
    Cli.Run r;
    try {
      r = Cli.inProcess("cat", "--plain-http", "--stats", ref, "/a/b/c/d/deep");
    } finally {
      opener.removeHandler(capture);
    }
    assertEquals(0, r.exitCode(), r.stderr());
    assertEquals("four directories down\n", r.out());
    Matcher m = Pattern.compile("received: (\\d+) bytes .*; image layers total (\\d+) bytes").matcher(r.stderr());
    assertTrue(m.find(), r.stderr());
    long received = Long.parseLong(m.group(1));
    assertTrue(Long.parseLong(m.group(2)) > 3_000_000, "a layer of several MB: " + m.group(2));
    assertTrue(received < 1_000_000, received + " bytes moved for one small file");
    String layer = layer().get("digest").asText();
    assertEquals(1, warnings.stream().filter(w -> w.contains(layer) && w.contains("no verifiable tar-split")).count(),
        "one warning names the layer: " + warnings);
  }

  @Test
  void requireTarSplit_refusesTheLayer_andSaysWhy() throws Exception {
    Path config = work.resolve("require-tar-split.toml");
    Files.writeString(config, "[snapshotter]\nrequire_tar_split = true\n");
    Cli.Run r = Cli.inProcess("cat", "--plain-http", "--config", config.toString(), ref, "/small/f1");
    assertNotEquals(0, r.exitCode());
    assertTrue(r.stderr().contains("require_tar_split") && r.stderr().contains(layer().get("digest").asText()),
        r.stderr());
  }

  @Test
  void theMountedLayer_isTheSourceTree_entryForEntry() throws Exception {
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    cache = PageCache.open(work.resolve("cache"),
        new CacheSettings(Optional.empty(), 64L << 20, 4L << 30, Duration.ofSeconds(10)));
    servingClients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE, Sleeper.SYSTEM,
        InstantSource.system());
    ImageReference image = ImageReference.parse(ref);
    var client = servingClients.client(image);
    Descriptor d = client.resolve(image, Platform.current()).manifest().layers().get(0);
    LazyLayer lazy = new LayerOpener(client, config, work.resolve("layers")).open(d);
    mount = LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()), new LayerContentReader(lazy, cache),
        FuseEvents.NONE), work.resolve("mnt"));
    TreeSnapshot expected = TreeSnapshot.of(src);
    TreeSnapshot mounted = TreeSnapshot.of(mount.mountPoint());
    assertTrue(expected.get("owned").contains("uid=1234 gid=5678") && expected.get("owned").contains("user.flatpull.note="),
        expected.get("owned"));
    assertTrue(expected.get("null").contains("rdev="), expected.get("null"));
    List<String> diff = expected.differences(mounted, 20);
    assertTrue(diff.isEmpty(), diff.size() + "+ differences, first ones:\n" + String.join("\n", diff));
    assertTrue(Files.isSymbolicLink(mount.mountPoint().resolve("link")));
    assertEquals(MTIME, Files.getLastModifiedTime(mount.mountPoint().resolve("zeros"), LinkOption.NOFOLLOW_LINKS).toInstant());
  }
}
