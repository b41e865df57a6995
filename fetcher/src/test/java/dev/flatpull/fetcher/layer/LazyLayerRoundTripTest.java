package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.github.luben.zstd.ZstdInputStream;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Await;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.GZIPInputStream;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveInputStream;
import dev.flatpull.fetcher.oci.Descriptor;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** Layers written by flatpull's converter read back entry for entry and byte for byte, lazily. */
class LazyLayerRoundTripTest {
  private static final long CHUNK = 64 * 1024;

  @TempDir Path dir;

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void everyEntry_readBackLazily_matchesTheSourceTar(LayerFormat format) throws Exception {
    SampleTar tar = new SampleTar(1, 1_000_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of(), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    LazyLayer lazy = new LazyLayer(index, layer.reader(), 0);

    assertEquals(tar.items.size(), index.entries().size(), "every tar entry is in the TOC, landmarks hidden");
    for (SampleTar.Item item : tar.items) {
      LayerEntry e = index.entry(item.name()).orElseThrow(() -> new AssertionError("missing " + item.name()));
      assertEquals(item.type(), e.type(), item.name());
      if (item.type() != EntryType.SYMLINK && item.type() != EntryType.HARDLINK) {
        // A link's own mode is meaningless: a symlink is 0777, a hard link shares its target's inode.
        assertEquals(item.mode(), e.mode(), item.name());
      }
      assertEquals(item.uid(), e.uid(), item.name());
      assertEquals(item.gid(), e.gid(), item.name());
      if (item.type() == EntryType.SYMLINK || item.type() == EntryType.HARDLINK) {
        assertEquals(item.link(), e.linkName(), item.name());
      }
      if (item.type() == EntryType.REG) {
        byte[] read = new byte[item.content().length];
        int n = lazy.read(e, 0, read, 0, read.length);
        assertEquals(item.content().length, n, item.name());
        assertArrayEquals(item.content(), read, item.name());
        if (item.content().length > 0) {
          assertEquals(java.util.Optional.of(Digest.sha256(item.content())), e.digest(), item.name());
        }
      }
    }
    LayerEntry dev = index.entry("dev/null").orElseThrow();
    assertEquals(1, dev.devMajor());
    assertEquals(3, dev.devMinor());
    assertArrayEquals("hello".getBytes(StandardCharsets.UTF_8), index.entry("etc/hostname").orElseThrow().xattrs().get("user.comment"));
    LayerEntry hard = index.entry("usr/bin/big-again").orElseThrow();
    assertEquals(tar.item("usr/bin/big").content().length, index.contentOf(hard).size());
    assertTrue(index.entry("etc/.wh.removed").orElseThrow().isWhiteout());
  }

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void wholeBlob_decompressedByAStandardReader_isATarWithTheSameFilesAndTheRecordedDiffId(LayerFormat format)
      throws Exception {
    SampleTar tar = new SampleTar(2, 300_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of(), dir);
    byte[] plain;
    try (InputStream in = format == LayerFormat.ESTARGZ
        ? new GZIPInputStream(new ByteArrayInputStream(layer.blob))
        : new ZstdInputStream(new ByteArrayInputStream(layer.blob))) {
      plain = in.readAllBytes();
    }
    assertEquals(layer.converted.diffId(), Digest.sha256(plain));
    assertEquals(layer.converted.uncompressedSize(), plain.length);
    List<String> names = new ArrayList<>();
    try (TarArchiveInputStream t = new TarArchiveInputStream(new ByteArrayInputStream(plain))) {
      TarArchiveEntry e;
      while ((e = t.getNextEntry()) != null) {
        String n = e.getName().endsWith("/") ? e.getName().substring(0, e.getName().length() - 1) : e.getName();
        names.add(n);
        SampleTar.Item item = tar.items.stream().filter(i -> i.name().equals(n)).findFirst().orElse(null);
        if (item == null) {
          continue;
        }
        switch (item.type()) {
          case REG -> assertArrayEquals(item.content(), t.readAllBytes(), n);
          case SYMLINK -> assertEquals(item.link(), e.getLinkName(), n);
          case HARDLINK -> assertTrue(e.isLink() && e.getLinkName().equals(item.link()), n);
          case FIFO -> assertTrue(e.isFIFO(), n);
          case CHAR -> assertTrue(e.isCharacterDevice() && e.getDevMajor() == 1 && e.getDevMinor() == 3, n);
          case DIR -> assertTrue(e.isDirectory(), n);
          default -> {}
        }
      }
    }
    for (SampleTar.Item i : tar.items) {
      assertTrue(names.contains(i.name()), "standard tar reader sees " + i.name());
    }
  }

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void smallRangeOfABigFile_fetchesOnlyTheCoveringChunks(LayerFormat format) throws Exception {
    SampleTar tar = new SampleTar(3, 2_000_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of(), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    layer.requests.set(0);
    layer.bytesServed.set(0);
    LazyLayer lazy = new LazyLayer(index, layer.reader(), 0);
    byte[] buf = new byte[100];
    lazy.read(index.entry("usr/bin/big").orElseThrow(), 1_000_000, buf, 0, 100);
    assertArrayEquals(java.util.Arrays.copyOfRange(tar.item("usr/bin/big").content(), 1_000_000, 1_000_100), buf);
    assertEquals(1, layer.requests.get());
    assertTrue(layer.bytesServed.get() < 2 * CHUNK, "one chunk's worth, not the file: " + layer.bytesServed.get());
  }

  @Test
  void anEstargzTocLargerThanTheTailWindow_opensInOneRequest_whereTheConverterAnnotatedItsOffset() throws Exception {
    // 8 MB in 4 KiB chunks: a TOC of thousands of entries, far beyond the 64 KiB tail window.
    SampleTar tar = new SampleTar(5, 8_000_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, LayerFormat.ESTARGZ, 4096, List.of(), dir);
    assertTrue(layer.descriptor.annotations().containsKey(LayerFormat.ESTARGZ_TOC_OFFSET));
    layer.requests.set(0);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    assertEquals(1, layer.requests.get(), "footer and TOC in one range");
    assertTrue(index.chunkCount() > 1900, "chunks: " + index.chunkCount());

    var withoutOffset = new java.util.HashMap<>(layer.descriptor.annotations());
    withoutOffset.remove(LayerFormat.ESTARGZ_TOC_OFFSET);
    Descriptor plain = new Descriptor(layer.descriptor.mediaType(), layer.descriptor.digest(), layer.descriptor.size(),
        withoutOffset);
    layer.requests.set(0);
    EstargzToc.read(plain, layer.reader(), FetchLimits.DEFAULTS);
    assertEquals(2, layer.requests.get(), "ctr-remote's layers: the tail window, then the rest of the TOC");

    var wrong = new java.util.HashMap<>(layer.descriptor.annotations());
    wrong.put(LayerFormat.ESTARGZ_TOC_OFFSET, "12");
    Descriptor misleading = new Descriptor(layer.descriptor.mediaType(), layer.descriptor.digest(),
        layer.descriptor.size(), wrong);
    assertEquals(index.chunkCount(), EstargzToc.read(misleading, layer.reader(), FetchLimits.DEFAULTS).chunkCount(),
        "a wrong offset costs bytes, never correctness: the footer and the TOC digest decide");
  }

  @Test
  void theConvertersTailLabel_describesTheLayerAsItsManifestDoes_andOpensItsTocInOneRequest() throws Exception {
    SampleTar tar = new SampleTar(5, 8_000_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, LayerFormat.ESTARGZ, 4096, List.of(), dir);
    EstargzTail tail = EstargzTail.parse(layer.descriptor.annotation(LayerFormat.ESTARGZ_TAIL_LABEL).orElseThrow())
        .orElseThrow();
    assertEquals(layer.descriptor.size(), tail.blobSize());
    assertEquals(layer.descriptor.annotation(LayerFormat.ESTARGZ_TOC_OFFSET).orElseThrow(),
        Long.toString(tail.tocOffset()));
    assertTrue(LayerFormat.ESTARGZ_TAIL_LABEL.startsWith("containerd.io/snapshot/"),
        "containerd passes only these annotations to a snapshotter");

    Digest toc = Digest.parse(layer.descriptor.annotation(LayerFormat.ESTARGZ_TOC_DIGEST).orElseThrow());
    Descriptor described = tail.descriptor(layer.descriptor.digest(), toc);
    assertTrue(EstargzTail.describes(described, layer.descriptor));
    layer.requests.set(0);
    LayerIndex early = EstargzToc.read(described, layer.reader(), FetchLimits.DEFAULTS);
    assertEquals(1, layer.requests.get(), "footer and TOC in one range, from the labels alone");
    LayerIndex late = layer.index(FetchLimits.DEFAULTS);
    assertEquals(late.chunkCount(), early.chunkCount());
    assertEquals(late.entries().size(), early.entries().size());
  }

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void wholeFileOfManyChunks_isFetchedInOneCoalescedRequest(LayerFormat format) throws Exception {
    SampleTar tar = new SampleTar(4, 1_000_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of(), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    LayerEntry big = index.entry("usr/bin/big").orElseThrow();
    assertTrue(big.chunks().size() >= 15, "chunked: " + big.chunks().size());
    layer.requests.set(0);
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    new LazyLayer(index, layer.reader(), 0).copyTo(big, out);
    assertArrayEquals(tar.item("usr/bin/big").content(), out.toByteArray());
    assertEquals(1, layer.requests.get());
  }

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void decodingOnAPool_returnsTheSameBytesAndStillRefusesCorruptChunks(LayerFormat format) throws Exception {
    SampleTar tar = new SampleTar(10, 1_500_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of(), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    ExecutorService pool = Executors.newFixedThreadPool(4);
    try {
      LazyLayer lazy = new LazyLayer(index, layer.reader(), 0, pool);
      java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
      lazy.copyTo(index.entry("usr/bin/big").orElseThrow(), out);
      assertArrayEquals(tar.item("usr/bin/big").content(), out.toByteArray());
      LayerEntry big = index.entry("usr/bin/big").orElseThrow();
      byte[] corrupt = layer.blob.clone();
      corrupt[(int) big.chunks().get(5).stored().offset() + 40] ^= 0x10;
      LazyLayer bad = new LazyLayer(index, layer.reader(corrupt), 0, pool);
      byte[] buf = new byte[(int) big.size()];
      IOException e = org.junit.jupiter.api.Assertions.assertThrows(IOException.class, () -> bad.read(big, 0, buf, 0, buf.length));
      assertFalse(e.getMessage().isEmpty());
      // The failed chunk left its single-flight slot: a later read with good bytes succeeds.
      assertArrayEquals(java.util.Arrays.copyOfRange(tar.item("usr/bin/big").content(), 0, 1000), readPrefix(lazy, big, 1000));
    } finally {
      pool.shutdownNow();
    }
  }

  /** A registry that garbles a response now and then: the read fetches again, and only a layer always wrong fails. */
  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void garbledResponses_areFetchedAgain_andOnlyBytesWrongEveryTimeFailTheRead(LayerFormat format) throws Exception {
    SampleTar tar = new SampleTar(11, 400_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of(), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    LayerEntry big = index.entry("usr/bin/big").orElseThrow();
    byte[] want = tar.item("usr/bin/big").content();
    for (int garbled = 0; garbled <= LazyLayer.CORRUPT_ATTEMPTS; garbled++) {
      AtomicInteger reads = new AtomicInteger();
      int wrongTimes = garbled;
      BlobReader flaky = range -> {
        byte[] b = java.util.Arrays.copyOfRange(layer.blob, (int) range.offset(), (int) range.end());
        if (reads.incrementAndGet() <= wrongTimes) {
          b[b.length / 2] ^= 0x5a; // inside the compressed chunk data
        }
        return b;
      };
      LazyLayer lazy = new LazyLayer(index, flaky, 0);
      byte[] buf = new byte[(int) Math.min(big.size(), CHUNK)];
      if (garbled < LazyLayer.CORRUPT_ATTEMPTS) {
        assertEquals(buf.length, lazy.read(big, 0, buf, 0, buf.length));
        assertArrayEquals(java.util.Arrays.copyOf(want, buf.length), buf, garbled + " garbled responses");
        assertEquals(garbled + 1, reads.get());
      } else {
        IOException e = org.junit.jupiter.api.Assertions.assertThrows(IOException.class,
            () -> lazy.read(big, 0, buf, 0, buf.length));
        assertTrue(e instanceof DigestMismatchException || e instanceof LayerFormatException, e.toString());
        assertEquals(LazyLayer.CORRUPT_ATTEMPTS, reads.get());
      }
    }
  }

  private static byte[] readPrefix(LazyLayer lazy, LayerEntry e, int n) throws IOException {
    byte[] b = new byte[n];
    lazy.read(e, 0, b, 0, n);
    return b;
  }

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void concurrentReadsOfOneChunk_shareOneFetch(LayerFormat format) throws Exception {
    SampleTar tar = new SampleTar(5, 200_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of(), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    AtomicInteger fetches = new AtomicInteger();
    CountDownLatch allWaiting = new CountDownLatch(1);
    BlobReader slow = range -> {
      fetches.incrementAndGet();
      try {
        allWaiting.await();
      } catch (InterruptedException e) {
        throw new java.io.InterruptedIOException();
      }
      return java.util.Arrays.copyOfRange(layer.blob, (int) range.offset(), (int) range.end());
    };
    LazyLayer lazy = new LazyLayer(index, slow, 0);
    LayerEntry odd = index.entry("usr/share/doc/odd").orElseThrow();
    List<Thread> readers = new java.util.concurrent.CopyOnWriteArrayList<>();
    ExecutorService pool = Executors.newFixedThreadPool(8, Await.recording(readers));
    try {
      List<Future<byte[]>> results = new ArrayList<>();
      for (int i = 0; i < 8; i++) {
        results.add(pool.submit(() -> {
          byte[] b = new byte[4097];
          lazy.read(odd, 0, b, 0, b.length);
          return b;
        }));
      }
      // Every reader is in: one fetching (held), seven waiting for its fetch.
      Await.until(Duration.ofSeconds(10), () -> readers.size() == 8, () -> readers.size() + " readers started");
      Await.waiting(Duration.ofSeconds(10), readers);
      allWaiting.countDown();
      for (Future<byte[]> f : results) {
        assertArrayEquals(tar.item("usr/share/doc/odd").content(), f.get());
      }
    } finally {
      pool.shutdownNow();
    }
    assertEquals(1, fetches.get());
  }

  @ParameterizedTest
  @EnumSource(value = LayerFormat.class, names = {"ESTARGZ", "ZSTD_CHUNKED"})
  void chunkWithAnyByteFlipped_isNeverReturnedWrong(LayerFormat format) throws Exception {
    SampleTar tar = new SampleTar(6, 10_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, format, CHUNK, List.of(), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    LayerEntry odd = index.entry("usr/share/doc/odd").orElseThrow();
    byte[] expected = tar.item("usr/share/doc/odd").content();
    LayerChunk chunk = odd.chunks().get(0);
    int refused = 0;
    for (long pos = chunk.stored().offset(); pos < chunk.stored().end(); pos++) {
      byte[] corrupt = layer.blob.clone();
      corrupt[(int) pos] ^= 0x01;
      LazyLayer lazy = new LazyLayer(index, layer.reader(corrupt), 0);
      byte[] got = new byte[expected.length];
      try {
        lazy.read(odd, 0, got, 0, got.length);
        assertArrayEquals(expected, got, "a flip at " + pos + " was served as different bytes");
      } catch (IOException e) {
        refused++;
        assertFalse(e.getMessage().isEmpty());
      }
    }
    assertTrue(refused > (chunk.stored().length() * 9) / 10,
        "most flips must be caught (" + refused + " of " + chunk.stored().length() + ")");
  }

  @org.junit.jupiter.api.Test
  void prioritizedFiles_comeFirstAndTheLandmarkRecordsThem() throws Exception {
    SampleTar tar = new SampleTar(7, 50_000);
    BuiltLayer layer = BuiltLayer.write(
        tar.bytes, LayerFormat.ESTARGZ, CHUNK, List.of("/usr/share/doc/odd", "etc/hostname", "not/there"), dir);
    LayerIndex index = layer.index(FetchLimits.DEFAULTS);
    assertEquals(List.of("usr/share/doc/odd", "etc/hostname"), index.prioritized());
    List<String> order = index.entries().stream().map(LayerEntry::name).toList();
    assertEquals(List.of("usr", "usr/share", "usr/share/doc", "usr/share/doc/odd", "etc", "etc/hostname"), order.subList(0, 6));
    long oddOffset = index.entry("usr/share/doc/odd").orElseThrow().chunks().get(0).stored().offset();
    long bigOffset = index.entry("usr/bin/big").orElseThrow().chunks().get(0).stored().offset();
    assertTrue(oddOffset < bigOffset, "prioritized content is stored first");
  }

  @org.junit.jupiter.api.Test
  void noPrioritizedFiles_noPrefetchList() throws Exception {
    SampleTar tar = new SampleTar(8, 5_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, LayerFormat.ESTARGZ, CHUNK, List.of(), dir);
    assertEquals(List.of(), layer.index(FetchLimits.DEFAULTS).prioritized());
    assertTrue(new String(layer.blob, StandardCharsets.ISO_8859_1).length() > 0);
  }

  @Test
  void zstdChunked_isWrittenAsTheCurrentContainersStorageCompressorWritesIt() throws Exception {
    SampleTar tar = new SampleTar(5, 300_000);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, LayerFormat.ZSTD_CHUNKED, CHUNK, List.of(), dir);
    var pos = ZstdChunkedToc.position(layer.descriptor, "layer");
    byte[] manifest = java.util.Arrays.copyOfRange(layer.blob, (int) pos.offset(), (int) (pos.offset() + pos.length()));
    var toc = new com.fasterxml.jackson.databind.ObjectMapper().readTree(com.github.luben.zstd.Zstd.decompress(
        manifest, (int) pos.uncompressed()));
    assertTrue(toc.path("tarSplitDigest").asText().startsWith("sha256:"), "the tar-split's digest is in the TOC");
    assertFalse(layer.descriptor.annotations().containsKey(LayerFormat.ZSTD_CHUNKED_TARSPLIT_CHECKSUM),
        "and no longer in an annotation");
    assertTrue(layer.descriptor.annotations().containsKey(LayerFormat.ZSTD_CHUNKED_TARSPLIT_POSITION));
    int zeros = 0;
    for (var e : toc.get("entries")) {
      String type = e.get("type").asText();
      assertFalse(type.equals("chunk") && e.has("endOffset"), "endOffset only on a file's own entry: " + e);
      if (type.equals("reg") && e.path("size").asLong() > 0) {
        assertTrue(e.has("endOffset"), "a file's entry bounds its frames: " + e);
      }
      if (e.path("chunkType").asText().equals("zeros")) {
        zeros++;
      }
    }
    assertEquals((300_000 + CHUNK - 1) / CHUNK, zeros, "every chunk of usr/share/zeros is marked zeros");
    assertTrue(layer.index(FetchLimits.DEFAULTS).tarSplitChecked());
  }
}
