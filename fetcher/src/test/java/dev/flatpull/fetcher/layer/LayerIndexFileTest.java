package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.NamedFiles;
import dev.flatpull.fetcher.layer.ContainersStorageWriter.Generation;
import dev.flatpull.fetcher.layer.ContainersStorageWriter.Written;
import dev.flatpull.fetcher.oci.Descriptor;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A layer's index kept as a binary file reads back equal, field for field, to the index its verified TOC gave; a
 * damaged, foreign or outdated file is refused with its reason, and the opener then reads the TOC and rebuilds it.
 */
class LayerIndexFileTest {
  @TempDir Path dir;

  private static final long CHUNK = 64 * 1024;

  private Path written(LayerIndexFile.Key key, LayerIndex index) throws IOException {
    Path file = dir.resolve(key.fileName());
    try (FileChannel ch = FileChannel.open(file, Set.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
        StandardOpenOption.WRITE))) {
      LayerIndexFile.write(key, index, ch);
    }
    return file;
  }

  /** Every field of every entry, chunks and xattr values by content, and the index's own fields. */
  static void assertSameIndex(LayerIndex expected, LayerIndex actual) {
    assertEquals(expected.format(), actual.format());
    assertEquals(expected.blob(), actual.blob());
    assertEquals(expected.tocDigest(), actual.tocDigest());
    assertEquals(expected.compression(), actual.compression());
    assertEquals(expected.prioritized(), actual.prioritized());
    assertEquals(expected.tarSplitDigest(), actual.tarSplitDigest());
    assertEquals(expected.tarSplitChecked(), actual.tarSplitChecked());
    assertArrayEquals(expected.tarSplitFrame(), actual.tarSplitFrame());
    assertEquals(expected.tarSplitLength(), actual.tarSplitLength());
    List<LayerEntry> want = new ArrayList<>(expected.entries());
    List<LayerEntry> got = new ArrayList<>(actual.entries());
    assertEquals(want.size(), got.size(), "entries");
    for (int i = 0; i < want.size(); i++) {
      String n = want.get(i).name();
      EntryTableTest.assertSameEntry(want.get(i), got.get(i));
      assertEquals(expected.entry(n).map(LayerEntry::name), actual.entry(n).map(LayerEntry::name), "lookup of " + n);
    }
  }

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void everyEntryKind_roundTrips(LayerFormat format) throws Exception {
    // Directories, files (setuid, empty, holes, long names, xattrs), a symlink, a hard link, a fifo, a device and a
    // whiteout; and a landmark-prioritized layer, so that the prioritized names are kept too.
    SampleTar tar = new SampleTar(7, 300_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of("usr/bin/big", "etc/hostname"), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    // Only eStargz carries the prioritized files' landmark.
    assertEquals(format == LayerFormat.ESTARGZ, !index.prioritized().isEmpty(), "the fixture is prioritized");
    LayerIndexFile.Key key = LayerIndexFile.Key.of(format, layer.descriptor);
    assertSameIndex(index, LayerIndexFile.read(key, written(key, index)));
  }

  @ParameterizedTest
  @EnumSource(Generation.class)
  void zstdChunkedAsContainersStorageWritesIt_roundTripsWithItsTarSplit(Generation g) throws Exception {
    Written w = ContainersStorageWriter.write(new SampleTar(3, 200_000).bytes, g);
    LayerIndex index = ZstdChunkedToc.read(w.descriptor(), range -> java.util.Arrays.copyOfRange(w.blob(),
        (int) range.offset(), (int) range.end()), FetchLimits.DEFAULTS);
    assertEquals(g.hasTarSplit(), index.tarSplitChecked());
    LayerIndexFile.Key key = LayerIndexFile.Key.of(LayerFormat.ZSTD_CHUNKED, w.descriptor());
    assertSameIndex(index, LayerIndexFile.read(key, written(key, index)));
  }

  @Test
  void aPathThousandsOfDirectoriesDeep_roundTrips() throws Exception {
    HostileLayers.Blob deep = HostileLayers.deep(2000, "deep\n".getBytes(StandardCharsets.US_ASCII), dir);
    LayerIndex index = EstargzToc.read(deep.descriptor(), range -> java.util.Arrays.copyOfRange(deep.bytes(),
        (int) range.offset(), (int) range.end()), FetchLimits.DEFAULTS);
    LayerIndexFile.Key key = LayerIndexFile.Key.of(LayerFormat.ESTARGZ, deep.descriptor());
    LayerIndex read = LayerIndexFile.read(key, written(key, index));
    assertSameIndex(index, read);
    assertTrue(read.entry(HostileLayers.deepPath(2000)).isPresent());
  }

  @Test
  void theKey_coversTheAnnotationsThatVouchForTheToc() throws Exception {
    BuiltLayer layer = BuiltLayer.write(new SampleTar(1, 1000).bytes, LayerFormat.ZSTD_CHUNKED, CHUNK, List.of(), dir);
    Descriptor d = layer.descriptor;
    Map<String, String> other = new HashMap<>(d.annotations());
    other.put(LayerFormat.ZSTD_CHUNKED_TARSPLIT_CHECKSUM, "sha256:" + "0".repeat(64));
    assertFalse(LayerIndexFile.Key.of(LayerFormat.ZSTD_CHUNKED, d).equals(
        LayerIndexFile.Key.of(LayerFormat.ZSTD_CHUNKED, new Descriptor(d.mediaType(), d.digest(), d.size(), other))));
    Map<String, String> unrelated = new HashMap<>(d.annotations());
    unrelated.put("org.opencontainers.image.title", "x");
    assertEquals(LayerIndexFile.Key.of(LayerFormat.ZSTD_CHUNKED, d),
        LayerIndexFile.Key.of(LayerFormat.ZSTD_CHUNKED, new Descriptor(d.mediaType(), d.digest(), d.size(), unrelated)));
  }

  /** A sound file, damaged as {@code damage} says, is refused with {@code reason}. */
  private void assertRefused(String reason, java.util.function.UnaryOperator<byte[]> damage) throws Exception {
    BuiltLayer layer = BuiltLayer.write(new SampleTar(2, 50_000).bytes, LayerFormat.ESTARGZ, CHUNK, List.of(), dir);
    LayerIndexFile.Key key = LayerIndexFile.Key.of(LayerFormat.ESTARGZ, layer.descriptor);
    Path file = written(key, layer.index(FetchLimits.DEFAULTS));
    Files.write(file, damage.apply(Files.readAllBytes(file)));
    LayerFormatException e = assertThrows(LayerFormatException.class, () -> LayerIndexFile.read(key, file));
    assertTrue(e.getMessage().contains(reason), e.getMessage());
    Files.delete(file);
  }

  @Test
  void aDamagedFile_isRefusedWithItsReason() throws Exception {
    assertRefused("shorter than its header", b -> java.util.Arrays.copyOf(b, 10));
    assertRefused("announces", b -> java.util.Arrays.copyOf(b, b.length - 100));
    assertRefused("checksum", b -> {
      b[b.length / 2] ^= 0x10;
      return b;
    });
    assertRefused("does not start as a layer index file", b -> {
      b[0] = 'X';
      return b;
    });
    assertRefused("format version is 9", b -> {
      b[11] = 9;
      return b;
    });
  }

  /** The table's head field at {@code field} set to {@code value}, with the checksum made to match again. */
  private static byte[] tableFieldSet(byte[] file, int field, int value) {
    java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(file);
    int first = b.getInt(LayerIndexFile.HEADER);
    int tableAt = LayerIndexFile.HEADER + 4 + first;
    tableAt += (8 - tableAt % 8) % 8;
    b.order(java.nio.ByteOrder.LITTLE_ENDIAN).putInt(tableAt + field, value).order(java.nio.ByteOrder.BIG_ENDIAN);
    java.util.zip.CRC32C crc = new java.util.zip.CRC32C();
    crc.update(file, LayerIndexFile.HEADER, file.length - LayerIndexFile.HEADER);
    b.putInt(12, (int) crc.getValue());
    return file;
  }

  @Test
  void aTableThatDoesNotHoldTogether_isRefusedEvenWithAMatchingChecksum() throws Exception {
    // Entries, chunks, the name table's size and the area's length, each wrong while the checksum holds: a file written by another
    // build's bug must be refused when opened, not fail a read later.
    assertRefused("malformed", b -> tableFieldSet(b, 0, 1 << 30));
    assertRefused("malformed", b -> tableFieldSet(b, 8, 3));
    assertRefused("malformed", b -> tableFieldSet(b, 4, 40));
    assertRefused("malformed", b -> tableFieldSet(b, 12, 7));
  }

  @Test
  void aFileOfAnotherLayer_isRefused() throws Exception {
    BuiltLayer one = BuiltLayer.write(new SampleTar(2, 50_000).bytes, LayerFormat.ESTARGZ, CHUNK, List.of(), dir);
    BuiltLayer two = BuiltLayer.write(new SampleTar(3, 50_000).bytes, LayerFormat.ESTARGZ, CHUNK, List.of(), dir);
    LayerIndexFile.Key first = LayerIndexFile.Key.of(LayerFormat.ESTARGZ, one.descriptor);
    Path file = written(first, one.index(FetchLimits.DEFAULTS));
    LayerFormatException e = assertThrows(LayerFormatException.class,
        () -> LayerIndexFile.read(LayerIndexFile.Key.of(LayerFormat.ESTARGZ, two.descriptor), file));
    assertTrue(e.getMessage().contains("another layer descriptor"), e.getMessage());
  }

  /** Kept files in a directory, as the page cache keeps them (written whole, then renamed). */
  static class DirectoryFiles implements NamedFiles {
    final Path root;
    final List<String> kept = new ArrayList<>();
    final List<String> removed = new ArrayList<>();

    DirectoryFiles(Path root) {
      this.root = root;
    }

    @Override
    public Optional<Path> find(String name) {
      Path p = root.resolve(name);
      return Files.exists(p) ? Optional.of(p) : Optional.empty();
    }

    @Override
    public void keep(String name, Writer writer) throws IOException {
      Path temp = root.resolve(name + ".tmp");
      try (FileChannel ch = FileChannel.open(temp, Set.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
          StandardOpenOption.WRITE))) {
        writer.write(ch);
      }
      Files.move(temp, root.resolve(name), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
      kept.add(name);
    }

    @Override
    public void remove(String name) throws IOException {
      Files.deleteIfExists(root.resolve(name));
      removed.add(name);
    }
  }

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void aKeptIndex_opensWithoutTheToc_andADamagedOneIsRebuiltFromIt(LayerFormat format) throws Exception {
    BuiltLayer layer = BuiltLayer.write(new SampleTar(4, 100_000).bytes, format, CHUNK, List.of(), dir);
    Path files = Files.createDirectory(dir.resolve("kept"));
    DirectoryFiles kept = new DirectoryFiles(files);
    List<Long> announced = new ArrayList<>();
    KeptIndexes indexes = new KeptIndexes(kept, (bytes, write) -> {
      announced.add(bytes);
      write.run();
    });
    LayerIndex first = indexes.open(layer.descriptor, layer.reader(), FetchLimits.DEFAULTS);
    int tocRequests = layer.requests.get();
    assertTrue(tocRequests > 0, "the first open reads the TOC");
    assertEquals(1, kept.kept.size(), "and keeps the index");
    long size = Files.size(files.resolve(kept.kept.get(0)));
    assertTrue(announced.get(0) <= size && size - announced.get(0) < 1024,
        "the write is scheduled with about the file's size: " + announced + " for " + size + " bytes");

    LayerIndex second = indexes.open(layer.descriptor, layer.reader(), FetchLimits.DEFAULTS);
    assertEquals(tocRequests, layer.requests.get(), "the second open reads no byte of the blob");
    assertSameIndex(first, second);

    Path file = files.resolve(kept.kept.get(0));
    byte[] b = Files.readAllBytes(file);
    b[b.length - 3] ^= 1;
    Files.write(file, b);
    List<String> warnings = new ArrayList<>();
    Handler h = new Handler() {
      @Override
      public void publish(LogRecord r) {
        warnings.add(r.getMessage());
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    Logger log = Logger.getLogger(KeptIndexes.class.getName());
    log.addHandler(h);
    LayerIndex third;
    try {
      third = indexes.open(layer.descriptor, layer.reader(), FetchLimits.DEFAULTS);
    } finally {
      log.removeHandler(h);
    }
    assertTrue(layer.requests.get() > tocRequests, "a damaged file sends the open back to the TOC");
    assertSameIndex(first, third);
    assertEquals(List.of(kept.kept.get(0)), kept.removed, "the damaged file is removed");
    assertEquals(2, kept.kept.size(), "and rebuilt");
    assertTrue(warnings.stream().anyMatch(w -> w.contains("checksum") && w.contains("rebuilt")), warnings.toString());
    assertSameIndex(first, LayerIndexFile.read(LayerIndexFile.Key.of(format, layer.descriptor), file));
  }

  @Test
  void aLayerForgottenBeforeItsFileIsWritten_getsNoFile() throws Exception {
    BuiltLayer layer = BuiltLayer.write(new SampleTar(6, 10_000).bytes, LayerFormat.ESTARGZ, CHUNK, List.of(), dir);
    DirectoryFiles kept = new DirectoryFiles(Files.createDirectory(dir.resolve("kept")));
    List<Runnable> held = new ArrayList<>();
    KeptIndexes indexes = new KeptIndexes(kept, (bytes, w) -> held.add(w));
    indexes.open(layer.descriptor, layer.reader(), FetchLimits.DEFAULTS);
    indexes.open(layer.descriptor, layer.reader(), FetchLimits.DEFAULTS);
    assertEquals(1, held.size(), "one write waits for the layer, however often it is opened meanwhile");
    indexes.forget(layer.descriptor);
    held.forEach(Runnable::run);
    assertEquals(List.of(), kept.kept, "the write that waited does not bring the removed layer's file back");

    indexes.open(layer.descriptor, layer.reader(), FetchLimits.DEFAULTS);
    held.get(held.size() - 1).run();
    assertEquals(1, kept.kept.size(), "a later open keeps it again");
    indexes.forget(layer.descriptor);
    assertTrue(kept.find(kept.removed.get(kept.removed.size() - 1)).isEmpty(), "and forgetting removes it");
  }

  @Test
  void aWriteRunTwice_keepsTheFileOnce() throws Exception {
    // The FUSE manager runs a write both when reads are quiet and after a deadline, whichever comes first.
    BuiltLayer layer = BuiltLayer.write(new SampleTar(6, 10_000).bytes, LayerFormat.ESTARGZ, CHUNK, List.of(), dir);
    AtomicLong writes = new AtomicLong();
    DirectoryFiles kept = new DirectoryFiles(Files.createDirectory(dir.resolve("kept"))) {
      @Override
      public void keep(String name, Writer writer) throws IOException {
        writes.incrementAndGet();
        super.keep(name, writer);
      }
    };
    List<Runnable> held = new ArrayList<>();
    new KeptIndexes(kept, (bytes, w) -> held.add(w)).open(layer.descriptor, layer.reader(), FetchLimits.DEFAULTS);
    held.get(0).run();
    held.get(0).run();
    assertEquals(1, writes.get());
    assertEquals(1, kept.kept.size());
  }

  @Test
  void anIndexThatCannotBeKept_stillOpens() throws Exception {
    BuiltLayer layer = BuiltLayer.write(new SampleTar(5, 10_000).bytes, LayerFormat.ESTARGZ, CHUNK, List.of(), dir);
    AtomicLong attempts = new AtomicLong();
    NamedFiles full = new DirectoryFiles(dir) {
      @Override
      public void keep(String name, Writer writer) throws IOException {
        attempts.incrementAndGet();
        throw new IOException("No space left on device");
      }
    };
    LayerIndex index = new KeptIndexes(full, KeptIndexes.AT_ONCE).open(layer.descriptor, layer.reader(), FetchLimits.DEFAULTS);
    assertEquals(1, attempts.get());
    assertFalse(index.entries().isEmpty());
  }
}
