package dev.flatpull.fuse;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.fetcher.layer.BuiltLayer;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.pagecache.PageCache;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class BackingFilesTest {
  private static final long MIN = 64 << 10;
  @TempDir Path dir;
  private LazyLayer layer;
  private PageCache cache;
  private byte[] a;
  private byte[] c;
  private final List<Runnable> held = new ArrayList<>();
  private final AtomicBoolean allowed = new AtomicBoolean(true);

  @BeforeEach
  void layer() throws Exception {
    Random r = new Random(5);
    a = new byte[200_000];
    r.nextBytes(a);
    c = new byte[150_000];
    r.nextBytes(c);
    LayerTar tar = new LayerTar().file("lib/a.so", a).file("other/a-copy.so", a).file("lib/c.so", c)
        .file("lib/small", new byte[1000]);
    layer = BuiltLayer.write(tar.bytes(), LayerFormat.ESTARGZ, 16 << 10, List.of(), dir).lazy(64 << 10);
    cache = PageCache.open(dir.resolve("cache"), new CacheSettings(Optional.empty(), 64L << 20, 1L << 30,
        Duration.ofSeconds(5)));
  }

  @AfterEach
  void close() throws Exception {
    cache.close();
  }

  private LayerEntry entry(String name) {
    return layer.index().entry(name).orElseThrow();
  }

  /** Verifies and caches the chunks of {@code file}, all but the last {@code leaveOut}. */
  private void cacheChunks(LayerEntry file, int leaveOut) throws Exception {
    List<LayerChunk> chunks = file.chunks().subList(0, file.chunks().size() - leaveOut);
    layer.fetch(file, chunks).forEach((chunk, content) -> {
      try {
        cache.put(chunk.digest(), content.bytes());
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    });
  }

  private BackingFiles backing() {
    return new BackingFiles(cache, MIN, Runnable::run, allowed::get);
  }

  @Test
  void aFileWhoseChunksAreAllVerified_isAssembledExactly_0600_inTheDiskBudget_andFoundOnTheNextOpen()
      throws Exception {
    BackingFiles backing = backing();
    LayerEntry e = entry("lib/a.so");
    cacheChunks(e, 0);
    long diskBytes = cache.stats().diskBytes();
    assertEquals(Optional.empty(), backing.find(e), "assembled for the next open, not this one");
    Path file = backing.find(e).orElseThrow();
    assertArrayEquals(a, Files.readAllBytes(file));
    assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(file)));
    assertEquals(new BackingFiles.Stats(1, a.length, 0), backing.stats());
    assertTrue(cache.stats().diskBytes() >= diskBytes + a.length, "counted in the page cache's disk budget");
  }

  @Test
  void aFileMissingOneChunk_isNeitherAssembledNorFound() throws Exception {
    BackingFiles backing = backing();
    LayerEntry e = entry("lib/c.so");
    assertTrue(e.chunks().size() > 2);
    cacheChunks(e, 1);
    backing.offer(e);
    assertEquals(Optional.empty(), backing.find(e));
    assertEquals(Optional.empty(), backing.find(e));
    assertEquals(new BackingFiles.Stats(0, 0, 0), backing.stats());
  }

  @Test
  void theSameContentAtAnotherPath_sharesOneBackingFile_andOtherContentHasItsOwn() throws Exception {
    assertEquals(BackingFiles.name(entry("lib/a.so")), BackingFiles.name(entry("other/a-copy.so")));
    assertNotEquals(BackingFiles.name(entry("lib/a.so")), BackingFiles.name(entry("lib/c.so")));
    BackingFiles backing = backing();
    cacheChunks(entry("lib/a.so"), 0);
    backing.offer(entry("lib/a.so"));
    assertArrayEquals(a, Files.readAllBytes(backing.find(entry("other/a-copy.so")).orElseThrow()));
    assertEquals(1, backing.stats().assembled());
  }

  @Test
  void whileReadsAreRecorded_noBackingFileIsFoundOrAssembled() throws Exception {
    BackingFiles backing = backing();
    LayerEntry e = entry("lib/a.so");
    cacheChunks(e, 0);
    allowed.set(false);
    backing.offer(e);
    assertEquals(0, backing.stats().assembled());
    allowed.set(true);
    backing.offer(e);
    assertTrue(backing.find(e).isPresent());
    allowed.set(false);
    assertEquals(Optional.empty(), backing.find(e), "a passthrough read would bypass the recorder");
  }

  @Test
  void filesBelowTheMinimum_getNone() throws Exception {
    BackingFiles backing = backing();
    LayerEntry e = entry("lib/small");
    cacheChunks(e, 0);
    backing.offer(e);
    assertEquals(Optional.empty(), backing.find(e));
    assertEquals(0, backing.stats().assembled());
    assertEquals(Optional.empty(), BackingFiles.NONE.find(entry("lib/a.so")));
  }

  @Test
  void aChunkEvictedBeforeTheAssemblyRuns_leavesNoFile_andIsCounted() throws Exception {
    BackingFiles backing = new BackingFiles(cache, MIN, held::add, () -> true);
    LayerEntry e = entry("lib/a.so");
    cacheChunks(e, 0);
    backing.offer(e);
    backing.offer(e);
    assertEquals(1, held.size(), "one assembly at a time per file");
    cache.empty();
    held.remove(0).run();
    assertEquals(new BackingFiles.Stats(0, 0, 1), backing.stats());
    try (var names = Files.list(dir.resolve("cache").resolve("named"))) {
      assertEquals(0, names.count());
    }
    try (var names = Files.list(dir.resolve("cache").resolve("tmp"))) {
      assertEquals(0, names.count(), "its partial file removed");
    }
    assertEquals(Optional.empty(), backing.find(e));
  }
}
