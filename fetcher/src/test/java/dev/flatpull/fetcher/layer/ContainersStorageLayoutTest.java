package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.github.luben.zstd.ZstdInputStream;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.ContainersStorageWriter.Generation;
import dev.flatpull.fetcher.layer.ContainersStorageWriter.Written;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.fetcher.oci.Descriptor;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * zstd:chunked layers as containers/storage's compressor writes them, every layout it has written (see
 * {@link ContainersStorageWriter}): read lazily and verified, and refused with the layer, the entry and the reason
 * when their TOC contradicts itself.
 */
class ContainersStorageLayoutTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** A blob reader over {@code blob} that counts the bytes it serves. */
  private static BlobReader counting(byte[] blob, AtomicLong served) {
    return range -> {
      served.addAndGet(range.length());
      return java.util.Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
    };
  }

  private static LayerIndex index(Written w) throws IOException {
    return ZstdChunkedToc.read(w.descriptor(), counting(w.blob(), new AtomicLong()), FetchLimits.DEFAULTS);
  }

  @ParameterizedTest
  @EnumSource(Generation.class)
  void everyLayout_readsEveryEntryLazily_byteForByte(Generation g) throws Exception {
    SampleTar tar = new SampleTar(3, 1_000_000);
    Written w = ContainersStorageWriter.write(tar.bytes, g);
    try (var in = new ZstdInputStream(new ByteArrayInputStream(w.blob()))) {
      assertArrayEquals(tar.bytes, in.readAllBytes(), "the writer's blob decompresses to its tar, as upstream's does");
    }
    LayerIndex index = index(w);
    assertEquals(g.hasTarSplit(), index.tarSplitChecked(), "the TOC checked against the tar-split where there is one");
    LazyLayer lazy = new LazyLayer(index, counting(w.blob(), new AtomicLong()), 0);
    assertEquals(tar.items.size(), index.entries().size());
    for (SampleTar.Item item : tar.items) {
      LayerEntry e = index.entry(item.name()).orElseThrow(() -> new AssertionError("missing " + item.name()));
      assertEquals(item.type(), e.type(), item.name());
      assertEquals(item.uid(), e.uid(), item.name());
      assertEquals(item.gid(), e.gid(), item.name());
      if (item.type() == EntryType.SYMLINK || item.type() == EntryType.HARDLINK) {
        assertEquals(item.link(), e.linkName(), item.name());
      } else {
        assertEquals(item.mode(), e.mode(), item.name());
      }
      if (item.type() == EntryType.REG) {
        byte[] read = new byte[item.content().length];
        assertEquals(read.length, lazy.read(e, 0, read, 0, read.length), item.name());
        assertArrayEquals(item.content(), read, item.name());
      }
    }
    assertEquals(1, index.entry("dev/null").orElseThrow().devMajor());
    assertArrayEquals("hello".getBytes(), index.entry("etc/hostname").orElseThrow().xattrs().get("user.comment"));
  }

  @Test
  void theWriter_producesWhatTheTestsAreAbout_manyChunksPerFile_zerosChunks_endOffsetOnlyOnTheFile() throws Exception {
    Written w = ContainersStorageWriter.write(new SampleTar(3, 1_000_000).bytes, Generation.V1_54);
    JsonNode entries = JSON.readTree(w.tocJson()).get("entries");
    int chunkEntries = 0;
    int zeros = 0;
    for (JsonNode e : entries) {
      if (e.path("type").asText().equals("chunk")) {
        chunkEntries++;
        assertTrue(e.path("endOffset").isMissingNode(), "no chunk entry has an endOffset: " + e);
      }
      if (e.path("chunkType").asText().equals("zeros")) {
        zeros++;
      }
    }
    assertTrue(chunkEntries >= 5, "content-defined chunks: " + chunkEntries);
    assertEquals(1, zeros, "the run of zeros in usr/share/holes");
    assertTrue(JSON.readTree(w.tocJson()).has("tarSplitDigest"));
  }

  @Test
  void aZerosChunk_isProducedWithoutAFetch() throws Exception {
    Written w = ContainersStorageWriter.write(new SampleTar(3, 1_000_000).bytes, Generation.V1_54);
    LayerIndex index = index(w);
    LayerEntry holes = index.entry("usr/share/holes").orElseThrow();
    LayerChunk hole = holes.chunks().stream().filter(c -> c.stored().isEmpty()).findFirst().orElseThrow();
    assertEquals(20_000, hole.size());
    AtomicLong served = new AtomicLong();
    LazyLayer lazy = new LazyLayer(index, counting(w.blob(), served), 0);
    byte[] read = new byte[(int) hole.size()];
    assertEquals(read.length, lazy.read(holes, hole.fileOffset(), read, 0, read.length));
    assertArrayEquals(new byte[read.length], read);
    assertEquals(0, served.get(), "nothing fetched for a run of zeros");
  }

  @Test
  void aZerosChunk_whoseDigestIsNotThatOfItsZeros_isRefused() throws Exception {
    Written w = write(entries -> each(entries, e -> {
      if (e.path("chunkType").asText().equals("zeros")) {
        e.put("chunkDigest", Digest.sha256(new byte[] {1}).toString());
      }
    }));
    LayerFormatException x = assertThrows(LayerFormatException.class, () -> index(w));
    assertMessage(x, w, "usr/share/holes", "not that of 20000 zero bytes");
  }

  @Test
  void aChunkStoredOutsideItsFilesFrames_isRefused() throws Exception {
    Written w = write(entries -> {
      ObjectNode big = file(entries, "usr/bin/big");
      big.put("endOffset", big.get("offset").asLong() + 100);
    });
    LayerFormatException x = assertThrows(LayerFormatException.class, () -> index(w));
    assertMessage(x, w, "usr/bin/big", "outside its file's frames");
  }

  @Test
  void aChunkOutsideItsFile_isRefused() throws Exception {
    Written w = write(entries -> {
      ObjectNode last = lastChunk(entries, "usr/bin/big");
      last.put("chunkSize", last.get("chunkSize").asLong() + 1);
    });
    LayerFormatException x = assertThrows(LayerFormatException.class, () -> index(w));
    assertMessage(x, w, "usr/bin/big", "lies outside the file size 1000000");
  }

  @Test
  void overlappingChunks_areRefused() throws Exception {
    Written w = write(entries -> {
      ObjectNode last = lastChunk(entries, "usr/bin/big");
      last.put("chunkOffset", last.get("chunkOffset").asLong() - 1);
    });
    LayerFormatException x = assertThrows(LayerFormatException.class, () -> index(w));
    assertMessage(x, w, "usr/bin/big", "chunks leave a gap or overlap");
  }

  @Test
  void chunkSizesThatDoNotAddUpToTheFile_areRefused() throws Exception {
    Written w = write(entries -> {
      ObjectNode big = file(entries, "usr/bin/big");
      big.put("size", big.get("size").asLong() + 4096);
    });
    LayerFormatException x = assertThrows(LayerFormatException.class, () -> index(w));
    assertMessage(x, w, "usr/bin/big", "chunks cover 1000000 of 1004096 bytes");
  }

  @Test
  void aSmallFile_ofALayerOfSeveralMegabytes_movesLessThanOneMegabyte() throws Exception {
    byte[] tar = new SampleTar(4, 6_000_000).bytes;
    Written w = ContainersStorageWriter.write(tar, Generation.V1_54);
    assertTrue(w.blob().length > 3_000_000, "layer of " + w.blob().length + " bytes");
    AtomicLong served = new AtomicLong();
    LayerIndex index = ZstdChunkedToc.read(w.descriptor(), counting(w.blob(), served), FetchLimits.DEFAULTS);
    LazyLayer lazy = new LazyLayer(index, counting(w.blob(), served), 0);
    LayerEntry hostname = index.entry("etc/hostname").orElseThrow();
    byte[] read = new byte[(int) hostname.size()];
    lazy.read(hostname, 0, read, 0, read.length);
    assertEquals("flatpull\n", new String(read));
    assertTrue(served.get() < 1_000_000, served.get() + " bytes moved for the TOC and one small file");
  }

  @Test
  void aTocThatDisagreesWithItsTarSplit_isRefused() throws Exception {
    Written w = write(entries -> file(entries, "etc/hostname").put("mode", 04755));
    LayerFormatException x = assertThrows(LayerFormatException.class, () -> index(w));
    assertMessage(x, w, "etc/hostname", "TOC and tar-split disagree");
    assertTrue(x.getMessage().contains("mode 4755 against 644"), x.getMessage());
  }

  @Test
  void aTocEntryTheTarSplitLacks_isRefused() throws Exception {
    Written w = write(entries -> entries.addObject().put("type", "dir").put("name", "smuggled"));
    LayerFormatException x = assertThrows(LayerFormatException.class, () -> index(w));
    assertMessage(x, w, "smuggled", "missing from the tar-split");
  }

  @Test
  void aTarSplitWhoseDigestDoesNotMatch_isRefused() throws Exception {
    Written w = ContainersStorageWriter.write(new SampleTar(3, 100_000).bytes, Generation.V1_50);
    Map<String, String> annotations = new HashMap<>(w.descriptor().annotations());
    annotations.put(LayerFormat.ZSTD_CHUNKED_TARSPLIT_CHECKSUM, Digest.sha256(new byte[] {7}).toString());
    Descriptor d = new Descriptor(w.descriptor().mediaType(), w.descriptor().digest(), w.descriptor().size(), annotations);
    DigestMismatchException x = assertThrows(DigestMismatchException.class,
        () -> ZstdChunkedToc.read(d, counting(w.blob(), new AtomicLong()), FetchLimits.DEFAULTS));
    assertTrue(x.getMessage().contains("tar-split"), x.getMessage());
  }

  @Test
  void theTocAndTheTarSplit_comeInOneRequest() throws Exception {
    Written w = ContainersStorageWriter.write(new SampleTar(3, 100_000).bytes, Generation.V1_54);
    AtomicLong requests = new AtomicLong();
    BlobReader r = range -> {
      requests.incrementAndGet();
      return java.util.Arrays.copyOfRange(w.blob(), (int) range.offset(), (int) range.end());
    };
    assertTrue(ZstdChunkedToc.read(w.descriptor(), r, FetchLimits.DEFAULTS).tarSplitChecked());
    assertEquals(1, requests.get());
  }

  @ParameterizedTest
  @EnumSource(Generation.class)
  void theTarStreamsDigest_isRebuiltFromTheTarSplitAndTheFiles_whereThereIsATarSplit(Generation g) throws Exception {
    SampleTar tar = new SampleTar(6, 300_000);
    Written w = ContainersStorageWriter.write(tar.bytes, g);
    LayerIndex index = index(w);
    LazyLayer lazy = new LazyLayer(index, counting(w.blob(), new AtomicLong()), 0);
    Optional<Digest> rebuilt = index.rebuiltDiffId((e, off, dst, len) -> lazy.read(e, off, dst, 0, len));
    assertEquals(g.hasTarSplit() ? Optional.of(Digest.sha256(tar.bytes)) : Optional.empty(), rebuilt);
  }

  // --- edits ---

  private static Written write(Consumer<ArrayNode> edit) throws IOException {
    return ContainersStorageWriter.write(new SampleTar(3, 1_000_000).bytes, Generation.V1_54, edit);
  }

  private static void each(ArrayNode entries, Consumer<ObjectNode> f) {
    entries.forEach(e -> f.accept((ObjectNode) e));
  }

  private static ObjectNode file(ArrayNode entries, String name) {
    for (JsonNode e : entries) {
      if (e.get("name").asText().equals(name) && e.get("type").asText().equals("reg")) {
        return (ObjectNode) e;
      }
    }
    throw new AssertionError("no " + name);
  }

  private static ObjectNode lastChunk(ArrayNode entries, String name) {
    List<ObjectNode> chunks = new ArrayList<>();
    each(entries, e -> {
      if (e.get("name").asText().equals(name) && e.get("type").asText().equals("chunk")) {
        chunks.add(e);
      }
    });
    return chunks.get(chunks.size() - 1);
  }

  private static void assertMessage(Exception x, Written w, String entry, String reason) {
    String m = x.getMessage();
    assertTrue(m.contains(w.descriptor().digest().toString()), "names the layer: " + m);
    assertTrue(m.contains(entry), "names the entry: " + m);
    assertTrue(m.contains(reason), "says why: " + m);
  }

}
