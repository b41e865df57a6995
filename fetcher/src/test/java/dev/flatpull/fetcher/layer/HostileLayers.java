package dev.flatpull.fetcher.layer;

import com.github.luben.zstd.Zstd;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPOutputStream;

/**
 * Malformed and hostile layers as whole blobs with their descriptors, one home for the unit tests of the TOC readers
 * and for the integration tests that push them to a registry and mount them. Each refused layer names a fragment of
 * the error it must be refused with, under {@link #LIMITS}.
 */
public final class HostileLayers {
  /** The limits the cases are made for: small enough that a few KiB of input can exceed each. */
  public static final FetchLimits LIMITS = new FetchLimits(1 << 20, 1 << 20, 1000, 1 << 20, 1L << 30);
  /** The same limits as a {@code [limits]} table of flatpull's configuration. */
  public static final String LIMITS_TOML = """
      [limits]
      max_manifest_size = "1MiB"
      max_toc_size = "1MiB"
      max_toc_entries = 1000
      max_chunk_size = "1MiB"
      max_layer_size = "1GiB"
      """;
  static final String DIGEST = Digest.sha256(new byte[] {1}).toString();

  /** A layer blob and the descriptor a manifest lists it with; {@code refusal} is null for a valid layer. */
  public record Blob(String name, byte[] bytes, Descriptor descriptor, String refusal) {
    @Override
    public String toString() {
      return name;
    }
  }

  private HostileLayers() {}

  /** An eStargz blob: 1000 bytes of "data", then a TOC member holding {@code json}, then the footer. */
  static Blob estargz(String name, byte[] json, String annotatedDigest, String refusal) {
    try {
      ByteArrayOutputStream blob = new ByteArrayOutputStream();
      blob.write(new byte[1000]);
      long tocOffset = blob.size();
      ByteArrayOutputStream tar = new ByteArrayOutputStream();
      TarWriter.writeEntry(tar, TarHeader.regular(EstargzToc.TOC_NAME, json.length, 0644, Instant.EPOCH), json);
      TarWriter.writeEnd(tar);
      try (GZIPOutputStream gz = new GZIPOutputStream(blob)) {
        gz.write(tar.toByteArray());
        gz.finish();
        blob.write(EstargzToc.footer(tocOffset));
      }
      byte[] b = blob.toByteArray();
      return new Blob(name, b, new Descriptor(MediaTypes.OCI_LAYER_GZIP, Digest.sha256(b), b.length,
          Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, annotatedDigest == null ? Digest.sha256(json).toString()
              : annotatedDigest)), refusal);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static Blob estargz(String name, String json, String refusal) {
    return estargz(name, json.getBytes(StandardCharsets.UTF_8), null, refusal);
  }

  /** The same blob with its last {@code bytes.length} bytes replaced (and its digest recomputed). */
  static Blob withTail(Blob b, String name, byte[] tail, String refusal) {
    byte[] bad = b.bytes().clone();
    System.arraycopy(tail, 0, bad, bad.length - tail.length, tail.length);
    Descriptor d = b.descriptor();
    return new Blob(name, bad, new Descriptor(d.mediaType(), Digest.sha256(bad), bad.length, d.annotations()), refusal);
  }

  /** A zstd:chunked blob: 1000 bytes, then the compressed manifest, announced at {@code position}. */
  static Blob zstdChunked(String name, byte[] manifest, String checksum, String position, String refusal) {
    byte[] b = Arrays.copyOf(new byte[1000], 1000 + manifest.length);
    System.arraycopy(manifest, 0, b, 1000, manifest.length);
    return new Blob(name, b, new Descriptor(MediaTypes.OCI_LAYER_ZSTD, Digest.sha256(b), b.length, Map.of(
        LayerFormat.ZSTD_CHUNKED_MANIFEST_CHECKSUM, checksum, LayerFormat.ZSTD_CHUNKED_MANIFEST_POSITION, position)),
        refusal);
  }

  static String reg(String name, long size, long offset, String extra) {
    return "{\"name\":\"" + name + "\",\"type\":\"reg\",\"size\":" + size + ",\"offset\":" + offset
        + ",\"chunkDigest\":\"" + DIGEST + "\"" + extra + "}";
  }

  static String toc(String... entries) {
    return "{\"version\":1,\"entries\":[" + String.join(",", entries) + "]}";
  }

  /** Every layer that must be refused at open (before any mount), each with its error's fragment. */
  public static List<Blob> refused() {
    List<Blob> all = new ArrayList<>();
    all.add(estargz("malformed-json", "{\"version\":1,\"entries\":[{\"name\":", "not valid JSON"));
    all.add(estargz("unknown-version", "{\"version\":2,\"entries\":[]}", "version is 2"));
    all.add(estargz("dot-dot-name", toc(reg("usr/../../etc/passwd", 5, 10, "")), "escapes the layer"));
    all.add(estargz("absolute-name", toc(reg("/etc/passwd", 5, 10, "")), "absolute entry name"));
    all.add(estargz("hardlink-escaping",
        toc("{\"name\":\"x\",\"type\":\"hardlink\",\"linkName\":\"../../etc/shadow\"}"), "escapes"));
    all.add(estargz("hardlink-to-nothing",
        toc("{\"name\":\"x\",\"type\":\"hardlink\",\"linkName\":\"missing\"}"), "hard link"));
    all.add(estargz("negative-offset", toc(reg("a", 5, -10, "")), "negative offset"));
    all.add(estargz("negative-chunk-size", toc(reg("a", 5, 10, ",\"chunkSize\":-1")), "negative"));
    all.add(estargz("negative-file-size", toc(reg("a", -5, 10, "")), "negative size"));
    all.add(estargz("overlapping-chunks",
        toc(reg("a", 5, 10, ",\"endOffset\":100"), reg("b", 5, 50, ",\"endOffset\":120")), "overlap"));
    all.add(estargz("chunk-outside-data", toc(reg("a", 5, 5000, "")), "outside the blob's data area"));
    all.add(estargz("chunks-with-gap", toc(reg("a", 100, 10, ",\"chunkSize\":50"),
        "{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":60,\"chunkSize\":40,\"chunkDigest\":\""
            + DIGEST + "\"}"), "gap"));
    all.add(estargz("orphan-chunk",
        toc("{\"name\":\"a\",\"type\":\"chunk\",\"offset\":20,\"chunkOffset\":0,\"chunkSize\":4}"),
        "does not follow its regular file"));
    all.add(estargz("chunk-without-digest", toc("{\"name\":\"a\",\"type\":\"reg\",\"size\":5,\"offset\":10}"),
        "no digest to verify it"));
    all.add(estargz("unknown-type", toc("{\"name\":\"a\",\"type\":\"socket\"}"), "unknown type 'socket'"));
    all.add(estargz("chunk-beyond-limit", toc(reg("a", 2L << 20, 10, "")), "limit"));
    String dir = "{\"name\":\"d\",\"type\":\"dir\"}";
    all.add(estargz("too-many-entries", toc(java.util.Collections.nCopies(1001, dir).toArray(String[]::new)),
        "limit"));
    // 64 MiB of spaces compress to a few tens of KiB.
    byte[] bomb = new byte[64 << 20];
    Arrays.fill(bomb, (byte) ' ');
    byte[] empty = toc().getBytes(StandardCharsets.UTF_8);
    System.arraycopy(empty, 0, bomb, bomb.length - empty.length, empty.length);
    all.add(estargz("toc-bomb", bomb, null, "limit"));
    Blob valid = estargz("valid", toc(), null);
    all.add(estargz("toc-digest-mismatch", empty, DIGEST, "digest"));
    all.add(withTail(valid, "footer-outside-blob", EstargzToc.footer(1L << 40), "outside the blob's data area"));
    all.add(withTail(valid, "no-footer", new byte[EstargzToc.FOOTER_SIZE], "no eStargz footer"));
    byte[] manifest = Zstd.compress(empty);
    all.add(zstdChunked("zstd-position-outside", manifest, Digest.sha256(manifest).toString(), "900000:200:300:1",
        "outside the blob"));
    all.add(zstdChunked("zstd-checksum-mismatch", manifest, DIGEST,
        "1000:" + manifest.length + ":" + empty.length + ":1", "digest"));
    all.add(zstdChunked("zstd-larger-than-announced", manifest, Digest.sha256(manifest).toString(),
        "1000:" + manifest.length + ":" + (empty.length - 3) + ":1", "more than the announced"));
    return all;
  }

  /** A valid eStargz layer of one small file {@code depth} directories deep, with no directory entries. */
  public static Blob deep(int depth, byte[] content, Path scratch) throws IOException {
    ByteArrayOutputStream tar = new ByteArrayOutputStream();
    TarWriter.writeEntry(tar, TarHeader.regular(deepPath(depth), content.length, 0644, Instant.EPOCH), content);
    TarWriter.writeEnd(tar);
    return converted("deep-" + depth, tar.toByteArray(), scratch);
  }

  /** The path of the file in {@link #deep}. */
  public static String deepPath(int depth) {
    return "d/".repeat(depth) + "f";
  }

  /** {@code tar} as an eStargz layer written by flatpull's converter. */
  public static Blob converted(String name, byte[] tar, Path scratch) throws IOException {
    InMemoryLayer layer = InMemoryLayer.estargz(tar, scratch);
    return new Blob(name, layer.blob(), layer.descriptor(), null);
  }
}
