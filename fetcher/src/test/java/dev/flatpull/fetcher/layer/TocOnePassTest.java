package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.zip.GZIPInputStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A held TOC is read in one pass when its chunks start in its entries' order, into the index two passes make of it;
 * otherwise, and whenever the index refuses it, two passes read it and say why.
 */
class TocOnePassTest {
  private static final Digest BLOB = Digest.sha256(new byte[] {3});
  private static final String D = HostileLayers.DIGEST;

  @TempDir Path dir;

  private static Optional<LayerIndex> onePass(byte[] json, long dataEnd) {
    return TocParser.onePass(json, "layer", LayerFormat.ESTARGZ, BLOB, Optional.empty(), ChunkCompression.GZIP,
        dataEnd, FetchLimits.DEFAULTS);
  }

  /** Two passes, as a TOC too large to hold is read. */
  private static LayerIndex twoPasses(byte[] json, long dataEnd, LayerFormat format) throws IOException {
    return TocParser.parse(() -> new ByteArrayInputStream(json), Optional.empty(), "layer", format, BLOB,
        Optional.empty(), format == LayerFormat.ESTARGZ ? ChunkCompression.GZIP : ChunkCompression.ZSTD, dataEnd,
        FetchLimits.DEFAULTS, 0);
  }

  private static void sameInOnePass(byte[] json, long dataEnd, LayerFormat format) throws IOException {
    Optional<LayerIndex> once = TocParser.onePass(json, "layer", format, BLOB, Optional.empty(),
        format == LayerFormat.ESTARGZ ? ChunkCompression.GZIP : ChunkCompression.ZSTD, dataEnd, FetchLimits.DEFAULTS);
    assertTrue(once.isPresent(), "read in two passes: " + new String(json, 0, Math.min(300, json.length),
        StandardCharsets.UTF_8));
    assertEquals(TocJsonTest.describe(twoPasses(json, dataEnd, format)), TocJsonTest.describe(once.get()));
  }

  /** The TOC's JSON of an eStargz layer flatpull's converter wrote. */
  private static byte[] estargzJson(BuiltLayer layer) throws IOException {
    int at = Integer.parseInt(layer.descriptor.annotation(LayerFormat.ESTARGZ_TOC_OFFSET).orElseThrow());
    try (var in = new GZIPInputStream(new ByteArrayInputStream(layer.blob, at,
        layer.blob.length - EstargzToc.FOOTER_SIZE - at))) {
      byte[] member = in.readAllBytes();
      long size = Long.parseLong(new String(member, 124, 11, StandardCharsets.US_ASCII).trim(), 8);
      return java.util.Arrays.copyOfRange(member, 512, 512 + (int) size);
    }
  }

  @Test
  void theConvertersTocs_eStargzWithALandmarkAndSmallChunks_readInOnePassAsInTwo() throws IOException {
    SampleTar tar = new SampleTar(7, 3 << 20);
    BuiltLayer layer = BuiltLayer.write(tar.bytes, LayerFormat.ESTARGZ, 64 << 10,
        List.of("usr/share/doc/odd", "etc/hostname"), Files.createDirectories(dir.resolve("e")));
    byte[] json = estargzJson(layer);
    long dataEnd = Long.parseLong(layer.descriptor.annotation(LayerFormat.ESTARGZ_TOC_OFFSET).orElseThrow());
    sameInOnePass(json, dataEnd, LayerFormat.ESTARGZ);
    assertEquals(List.of("usr/share/doc/odd", "etc/hostname"), onePass(json, dataEnd).orElseThrow().prioritized());
  }

  @Test
  void containersStoragesTocs_everyGeneration_readInOnePassAsInTwo() throws IOException {
    SampleTar tar = new SampleTar(11, 1 << 20);
    for (ContainersStorageWriter.Generation g : ContainersStorageWriter.Generation.values()) {
      ContainersStorageWriter.Written w = ContainersStorageWriter.write(tar.bytes, g);
      sameInOnePass(w.tocJson(), w.blob().length, LayerFormat.ZSTD_CHUNKED);
    }
  }

  @Test
  void entriesWaitingForAChunksEnd_keepTheirOrder_andTheLandmarksPlace() throws IOException {
    String json = HostileLayers.toc(
        "{\"name\":\"a\",\"type\":\"reg\",\"size\":5,\"offset\":100,\"chunkDigest\":\"" + D + "\"}",
        "{\"name\":\"d\",\"type\":\"dir\"}",
        "{\"name\":\"d/l\",\"type\":\"symlink\",\"linkName\":\"a\"}",
        // A landmark with no offset of its own: it waits behind a, whose end is not known yet.
        "{\"name\":\"" + LayerIndex.PREFETCH_LANDMARK + "\",\"type\":\"reg\",\"size\":1}",
        "{\"name\":\"b\",\"type\":\"reg\",\"size\":10,\"offset\":200,\"chunkSize\":4,\"chunkDigest\":\"" + D + "\"}",
        "{\"name\":\"b\",\"type\":\"chunk\",\"offset\":200,\"innerOffset\":4,\"chunkOffset\":4,\"chunkSize\":6,"
            + "\"chunkDigest\":\"" + D + "\"}",
        "{\"name\":\"h\",\"type\":\"hardlink\",\"linkName\":\"b\"}",
        "{\"name\":\"c\",\"type\":\"reg\",\"size\":3,\"offset\":300,\"chunkDigest\":\"" + D + "\"}");
    byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
    sameInOnePass(bytes, 1000, LayerFormat.ESTARGZ);
    String index = TocJsonTest.describe(onePass(bytes, 1000).orElseThrow());
    // a ends where b starts; b's two chunks share their member, which ends where c starts; c at the data's end.
    assertTrue(index.startsWith("index: [a]\n"), index);
    assertTrue(index.contains("stored=[100, 200)"), index);
    assertTrue(index.contains("stored=[200, 300), innerOffset=4"), index);
    assertTrue(index.contains("stored=[300, 1000)"), index);
  }

  @Test
  void startsOutOfOrder_areReadInTwoPasses_withEachChunkEndingAtTheNextStart() throws IOException {
    byte[] json = HostileLayers.toc(HostileLayers.reg("a", 5, 500, ""), HostileLayers.reg("b", 5, 100, ""))
        .getBytes(StandardCharsets.UTF_8);
    assertTrue(onePass(json, 1000).isEmpty());
    String index = TocJsonTest.describe(parse(json, 1000));
    assertTrue(index.contains("stored=[500, 1000)"), index);
    assertTrue(index.contains("stored=[100, 500)"), index);
  }

  @Test
  void moreEntriesWaitingThanTheBound_areReadInTwoPasses() throws IOException {
    // Files packed into one stored member (eStargz inner offsets): every one waits for a start after them.
    String[] files = new String[TocParser.MAX_WAITING + 10];
    for (int k = 0; k < files.length; k++) {
      files[k] = HostileLayers.reg("f" + k, 1, 100, ",\"innerOffset\":" + k);
    }
    byte[] json = HostileLayers.toc(files).getBytes(StandardCharsets.UTF_8);
    assertTrue(onePass(json, 1L << 20).isEmpty());
    byte[] fewer = HostileLayers.toc(java.util.Arrays.copyOf(files, 100)).getBytes(StandardCharsets.UTF_8);
    sameInOnePass(fewer, 1L << 20, LayerFormat.ESTARGZ);
    assertEquals(files.length, parse(json, 1L << 20).entries().size());
  }

  @Test
  void aVersionAfterTheEntries_isReadInTwoPasses() throws IOException {
    byte[] json = ("{\"entries\":[" + HostileLayers.reg("a", 5, 100, "") + "],\"version\":1}")
        .getBytes(StandardCharsets.UTF_8);
    assertTrue(onePass(json, 1000).isEmpty());
    assertEquals(1, parse(json, 1000).entries().size());
  }

  @Test
  void aTocWithTwoFaults_isRefusedForTheFirst_asTwoPassesFindIt() {
    // The first file's chunk has no digest, which its build finds when the next entry starts; the next entry's type
    // is unknown. One pass, with the file waiting for its chunk's end, meets the type first: two passes say why.
    byte[] json = HostileLayers.toc("{\"name\":\"a\",\"type\":\"reg\",\"size\":5,\"offset\":10}",
        "{\"name\":\"b\",\"type\":\"socket\"}").getBytes(StandardCharsets.UTF_8);
    assertTrue(onePass(json, 1000).isEmpty());
    LayerFormatException e = org.junit.jupiter.api.Assertions.assertThrows(LayerFormatException.class,
        () -> parse(json, 1000));
    assertTrue(e.getMessage().contains("no digest to verify it"), e.getMessage());
  }

  /** The whole parse of a held TOC, one pass or two. */
  private static LayerIndex parse(byte[] json, long dataEnd) throws IOException {
    return TocParser.parse(json, "layer", LayerFormat.ESTARGZ, BLOB, Optional.empty(), ChunkCompression.GZIP, dataEnd,
        FetchLimits.DEFAULTS);
  }
}
