package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.github.luben.zstd.Zstd;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Arrays;
import java.util.Map;
import java.util.zip.GZIPOutputStream;
import org.junit.jupiter.api.Test;

/** Malformed or hostile TOCs, footers and annotations are refused with a clear error, never half-read. */
class HostileTocTest {
  private static final FetchLimits LIMITS = FetchLimits.DEFAULTS;
  private static final String DIGEST = Digest.sha256(new byte[] {1}).toString();

  /** An eStargz blob: 1000 bytes of "data", then a TOC member holding {@code json}, then the footer. */
  private static Descriptor estargz(byte[] json, byte[][] blobOut, String annotatedDigest) throws IOException {
    ByteArrayOutputStream blob = new ByteArrayOutputStream();
    blob.write(new byte[1000]);
    long tocOffset = blob.size();
    ByteArrayOutputStream tar = new ByteArrayOutputStream();
    TarWriter.writeHeader(tar, TarHeader.regular(EstargzToc.TOC_NAME, json.length, 0644, Instant.EPOCH));
    tar.write(json);
    TarWriter.pad(tar, json.length);
    TarWriter.writeEnd(tar);
    try (GZIPOutputStream gz = new GZIPOutputStream(blob)) {
      gz.write(tar.toByteArray());
      gz.finish();
      blob.write(EstargzToc.footer(tocOffset));
      blobOut[0] = blob.toByteArray();
    }
    return new Descriptor(MediaTypes.OCI_LAYER_GZIP, Digest.sha256(blobOut[0]), blobOut[0].length,
        Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, annotatedDigest == null ? Digest.sha256(json).toString() : annotatedDigest));
  }

  private static IOException refuse(String toc) {
    return refuse(toc.getBytes(StandardCharsets.UTF_8), LIMITS);
  }

  private static IOException refuse(byte[] json, FetchLimits limits) {
    byte[][] blob = new byte[1][];
    return assertThrows(IOException.class, () -> {
      Descriptor d = estargz(json, blob, null);
      EstargzToc.read(d, r -> Arrays.copyOfRange(blob[0], (int) r.offset(), (int) r.end()), limits);
    });
  }

  private static void assertMessage(IOException e, String fragment) {
    assertTrue(e.getMessage().contains(fragment), "message '" + e.getMessage() + "' should contain '" + fragment + "'");
  }

  private static String reg(String name, long size, long offset, String extra) {
    return "{\"name\":\"" + name + "\",\"type\":\"reg\",\"size\":" + size + ",\"offset\":" + offset
        + ",\"chunkDigest\":\"" + DIGEST + "\"" + extra + "}";
  }

  private static String toc(String... entries) {
    return "{\"version\":1,\"entries\":[" + String.join(",", entries) + "]}";
  }

  @Test
  void read_malformedJson_isRefused() {
    IOException e = refuse("{\"version\":1,\"entries\":[{\"name\":");
    assertMessage(e, "not valid JSON");
  }

  @Test
  void read_unknownVersion_isRefused() {
    assertMessage(refuse("{\"version\":2,\"entries\":[]}"), "version is 2");
  }

  @Test
  void read_dotDotName_isRefused() {
    assertMessage(refuse(toc(reg("usr/../../etc/passwd", 5, 10, ""))), "escapes the layer");
  }

  @Test
  void read_absoluteName_isRefused() {
    assertMessage(refuse(toc(reg("/etc/passwd", 5, 10, ""))), "absolute entry name");
  }

  @Test
  void read_hardLinkEscapingTheLayer_isRefused() {
    assertMessage(refuse(toc("{\"name\":\"x\",\"type\":\"hardlink\",\"linkName\":\"../../etc/shadow\"}")), "escapes");
  }

  @Test
  void read_hardLinkToNothing_isRefused() {
    assertMessage(refuse(toc("{\"name\":\"x\",\"type\":\"hardlink\",\"linkName\":\"missing\"}")), "hard link");
  }

  @Test
  void read_negativeOffset_isRefused() {
    assertMessage(refuse(toc(reg("a", 5, -10, ""))), "negative offset");
  }

  @Test
  void read_negativeChunkSize_isRefused() {
    assertMessage(refuse(toc(reg("a", 5, 10, ",\"chunkSize\":-1"))), "negative");
  }

  @Test
  void read_negativeFileSize_isRefused() {
    assertMessage(refuse(toc(reg("a", -5, 10, ""))), "negative size");
  }

  @Test
  void read_overlappingChunks_areRefused() {
    assertMessage(refuse(toc(reg("a", 5, 10, ",\"endOffset\":100"), reg("b", 5, 50, ",\"endOffset\":120"))), "overlap");
  }

  @Test
  void read_chunkOutsideTheDataArea_isRefused() {
    assertMessage(refuse(toc(reg("a", 5, 5000, ""))), "outside the blob's data area");
  }

  @Test
  void read_chunksLeavingAGap_areRefused() {
    String first = reg("a", 100, 10, ",\"chunkSize\":50");
    String second = "{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":60,\"chunkSize\":40,\"chunkDigest\":\"" + DIGEST + "\"}";
    assertMessage(refuse(toc(first, second)), "gap");
  }

  @Test
  void read_chunkNotFollowingItsFile_isRefused() {
    assertMessage(refuse(toc("{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":0,\"chunkSize\":4}")),
        "does not follow its regular file");
  }

  @Test
  void read_chunkWithoutDigest_isRefused() {
    assertMessage(refuse(toc("{\"name\":\"a\",\"type\":\"reg\",\"size\":5,\"offset\":10}")), "no digest to verify it");
  }

  @Test
  void read_unknownType_isRefused() {
    assertMessage(refuse(toc("{\"name\":\"a\",\"type\":\"socket\"}")), "unknown type 'socket'");
  }

  @Test
  void read_chunkBeyondTheSizeLimit_isRefused() {
    FetchLimits small = new FetchLimits(1 << 20, 1 << 20, 1000, 4096, 1 << 30);
    IOException e = refuse(toc(reg("a", 100_000, 10, "")).getBytes(StandardCharsets.UTF_8), small);
    assertTrue(e instanceof SizeLimitExceededException, e.toString());
  }

  @Test
  void read_tooManyEntries_isRefused() {
    FetchLimits small = new FetchLimits(1 << 20, 1 << 20, 3, 1 << 20, 1 << 30);
    String dir = "{\"name\":\"d\",\"type\":\"dir\"}";
    IOException e = refuse(toc(dir, dir, dir, dir).getBytes(StandardCharsets.UTF_8), small);
    assertTrue(e instanceof SizeLimitExceededException, e.toString());
  }

  @Test
  void read_tocThatDecompressesBeyondTheLimit_isRefusedAsABomb() {
    // 64 MiB of spaces compress to a few tens of KiB.
    byte[] bomb = new byte[64 << 20];
    Arrays.fill(bomb, (byte) ' ');
    byte[] json = toc().getBytes(StandardCharsets.UTF_8);
    System.arraycopy(json, 0, bomb, bomb.length - json.length, json.length);
    FetchLimits small = new FetchLimits(1 << 20, 1 << 20, 1000, 1 << 20, 1 << 30);
    IOException e = refuse(bomb, small);
    assertTrue(e instanceof SizeLimitExceededException, e.toString());
  }

  @Test
  void read_tocDigestMismatch_isRefused() throws IOException {
    byte[][] blob = new byte[1][];
    Descriptor d = estargz(toc().getBytes(StandardCharsets.UTF_8), blob, DIGEST);
    assertThrows(DigestMismatchException.class,
        () -> EstargzToc.read(d, r -> Arrays.copyOfRange(blob[0], (int) r.offset(), (int) r.end()), LIMITS));
  }

  @Test
  void read_footerPointingOutsideTheBlob_isRefused() throws IOException {
    byte[][] blob = new byte[1][];
    Descriptor d = estargz(toc().getBytes(StandardCharsets.UTF_8), blob, null);
    byte[] bad = blob[0].clone();
    System.arraycopy(EstargzToc.footer(1L << 40), 0, bad, bad.length - EstargzToc.FOOTER_SIZE, EstargzToc.FOOTER_SIZE);
    IOException e = assertThrows(IOException.class,
        () -> EstargzToc.read(d, r -> Arrays.copyOfRange(bad, (int) r.offset(), (int) r.end()), LIMITS));
    assertMessage(e, "outside the blob's data area");
  }

  @Test
  void read_noFooter_isRefused() throws IOException {
    byte[][] blob = new byte[1][];
    Descriptor d = estargz(toc().getBytes(StandardCharsets.UTF_8), blob, null);
    byte[] bad = blob[0].clone();
    Arrays.fill(bad, bad.length - EstargzToc.FOOTER_SIZE, bad.length, (byte) 0);
    IOException e = assertThrows(IOException.class,
        () -> EstargzToc.read(d, r -> Arrays.copyOfRange(bad, (int) r.offset(), (int) r.end()), LIMITS));
    assertMessage(e, "no eStargz footer");
  }

  @Test
  void read_zstdChunkedPositionOutsideTheBlob_isRefused() {
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER_ZSTD, Digest.parse(DIGEST), 1000, Map.of(
        LayerFormat.ZSTD_CHUNKED_MANIFEST_CHECKSUM, DIGEST,
        LayerFormat.ZSTD_CHUNKED_MANIFEST_POSITION, "900:200:300:1"));
    IOException e = assertThrows(IOException.class, () -> ZstdChunkedToc.read(d, r -> new byte[0], LIMITS));
    assertMessage(e, "outside the blob");
  }

  @Test
  void read_zstdChunkedChecksumMismatch_isRefused() {
    byte[] manifest = Zstd.compress(toc().getBytes(StandardCharsets.UTF_8));
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER_ZSTD, Digest.parse(DIGEST), 1000 + manifest.length, Map.of(
        LayerFormat.ZSTD_CHUNKED_MANIFEST_CHECKSUM, DIGEST,
        LayerFormat.ZSTD_CHUNKED_MANIFEST_POSITION, "1000:" + manifest.length + ":" + toc().length() + ":1"));
    assertThrows(DigestMismatchException.class, () -> ZstdChunkedToc.read(d, r -> manifest, LIMITS));
  }

  @Test
  void read_zstdChunkedTocLargerThanAnnounced_isRefused() {
    byte[] json = toc().getBytes(StandardCharsets.UTF_8);
    byte[] manifest = Zstd.compress(json);
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER_ZSTD, Digest.parse(DIGEST), 1000 + manifest.length, Map.of(
        LayerFormat.ZSTD_CHUNKED_MANIFEST_CHECKSUM, Digest.sha256(manifest).toString(),
        LayerFormat.ZSTD_CHUNKED_MANIFEST_POSITION, "1000:" + manifest.length + ":" + (json.length - 3) + ":1"));
    IOException e = assertThrows(IOException.class, () -> ZstdChunkedToc.read(d, r -> manifest, LIMITS));
    assertMessage(e, "more than the announced");
  }

  @Test
  void of_gzipLayerWithoutTocAnnotation_isReadAsPlainNotTrusted() throws Exception {
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER_GZIP, Digest.parse(DIGEST), 10, Map.of());
    org.junit.jupiter.api.Assertions.assertEquals(LayerFormat.PLAIN, LayerFormat.of(d));
  }
}
