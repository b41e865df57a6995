package dev.flatpull.fetcher.layer;

import com.github.luben.zstd.ZstdInputStream;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.BoundedInputStream;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.oci.Descriptor;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Optional;

/**
 * Reads a zstd:chunked layer's TOC ("manifest"): its position comes from the
 * {@code io.github.containers.zstd-chunked.manifest-position} annotation ({@code offset:length:uncompressed:type}),
 * the compressed bytes must hash to {@code ...manifest-checksum}, and they decompress to the same JSON TOC as eStargz
 * uses. containers/storage writes explicit {@code endOffset}s; the first version of the format, which
 * stargz-snapshotter's converter still writes with {@code io.containers.zstd-chunked.*} annotations and a 40-byte
 * footer, does not, and is read the eStargz way (a chunk ends where the next stored chunk starts).
 */
public final class ZstdChunkedToc {
  /** The footer: a skippable frame (magic, size 64) with eight little-endian longs, the last being "GNUlInUx". */
  public static final int FOOTER_SIZE = 72;
  public static final long FOOTER_MAGIC = 0x78556e496c554e47L;
  public static final int SKIPPABLE_MAGIC = 0x184d2a50;

  private ZstdChunkedToc() {}

  /** The TOC's place in the blob, parsed from the position annotation. */
  record Position(long offset, long length, long uncompressed) {}

  public static LayerIndex read(Descriptor layer, BlobReader blob, FetchLimits limits) throws IOException {
    String name = "zstd:chunked layer " + layer.digest();
    Digest expected;
    try {
      expected = Digest.parse(annotation(layer, LayerFormat.ZSTD_CHUNKED_MANIFEST_CHECKSUM,
          LayerFormat.LEGACY_ZSTD_CHUNKED_MANIFEST_CHECKSUM));
    } catch (IllegalArgumentException e) {
      throw new LayerFormatException(name + ": annotation " + LayerFormat.ZSTD_CHUNKED_MANIFEST_CHECKSUM + ": " + e.getMessage(), e);
    }
    Position pos = position(layer, name);
    if (pos.length() > limits.maxTocBytes() || pos.uncompressed() > limits.maxTocBytes()) {
      throw new SizeLimitExceededException(name + ": TOC", limits.maxTocBytes());
    }
    Optional<Position> split = tarSplitPosition(layer, name);
    if (split.isPresent() && (split.get().length() > limits.maxTocBytes() || split.get().uncompressed() > limits.maxTocBytes())) {
      throw new SizeLimitExceededException(name + ": tar-split", limits.maxTocBytes());
    }
    // containers/storage writes the tar-split's frame right after the TOC's: one request fetches both.
    boolean adjacent = split.isPresent() && split.get().offset() == pos.offset() + pos.length() + 8;
    byte[] fetched = blob.read(new ByteRange(pos.offset(), adjacent ? split.get().offset() + split.get().length() - pos.offset() : pos.length()));
    byte[] compressed = java.util.Arrays.copyOf(fetched, (int) pos.length());
    Digest actual = expected.recompute(compressed, 0, compressed.length);
    if (!actual.equals(expected)) {
      throw new DigestMismatchException(name + " TOC", expected, actual);
    }
    byte[] json = decompress(compressed, pos.uncompressed(), name + ": TOC");
    LayerIndex index = TocParser.parse(
        json, name, LayerFormat.ZSTD_CHUNKED, layer.digest(), Optional.of(expected), ChunkCompression.ZSTD,
        pos.offset(), limits);
    // The tar-split is vouched for by the TOC (containers/storage 1.54 and later) or by an annotation of the manifest
    // (1.47 to 1.53); without either it cannot be trusted and is not read, as containers/storage does.
    Optional<Digest> splitDigest = index.tarSplitDigest();
    if (splitDigest.isEmpty()) {
      try {
        splitDigest = layer.annotation(LayerFormat.ZSTD_CHUNKED_TARSPLIT_CHECKSUM).map(Digest::parse);
      } catch (IllegalArgumentException e) {
        throw new LayerFormatException(name + ": annotation " + LayerFormat.ZSTD_CHUNKED_TARSPLIT_CHECKSUM + ": " + e.getMessage(), e);
      }
    }
    if (splitDigest.isEmpty()) {
      return index;
    }
    if (split.isEmpty()) {
      throw new LayerFormatException(name + ": the TOC names a tar-split but annotation "
          + LayerFormat.ZSTD_CHUNKED_TARSPLIT_POSITION + " gives no position");
    }
    Position at = split.get();
    byte[] splitCompressed = adjacent
        ? java.util.Arrays.copyOfRange(fetched, (int) (at.offset() - pos.offset()), fetched.length)
        : blob.read(new ByteRange(at.offset(), at.length()));
    Digest splitActual = splitDigest.get().recompute(splitCompressed, 0, splitCompressed.length);
    if (!splitActual.equals(splitDigest.get())) {
      throw new DigestMismatchException(name + " tar-split", splitDigest.get(), splitActual);
    }
    TarSplit.checkMatches(splitCompressed, at.uncompressed(), index, name, limits);
    return index.withTarSplitChecked(splitCompressed, at.uncompressed());
  }

  /**
   * Decompresses one verified zstd frame to exactly the {@code announced} length (already bounded by the limits), into
   * one array of that size: a stream's growing buffers allocated the document three times over.
   */
  static byte[] decompress(byte[] compressed, long announced, String what) throws IOException {
    byte[] out = new byte[(int) announced];
    long n;
    try (com.github.luben.zstd.ZstdDecompressCtx ctx = new com.github.luben.zstd.ZstdDecompressCtx()) {
      n = ctx.decompressByteArray(out, 0, out.length, compressed, 0, compressed.length);
    } catch (com.github.luben.zstd.ZstdException e) {
      if (e.getErrorCode() == com.github.luben.zstd.Zstd.errDstSizeTooSmall()) {
        throw new LayerFormatException(what + " decompresses to more than the announced " + announced + " bytes", e);
      }
      throw new LayerFormatException(what + " is not a valid zstd frame: " + e.getMessage(), e);
    }
    if (n != announced) {
      throw new LayerFormatException(what + " decompresses to " + n + " bytes, the annotation says " + announced);
    }
    return out;
  }

  /** The tar-split's place, from {@code ...tarsplit-position} ({@code offset:length:uncompressed}), when given. */
  static Optional<Position> tarSplitPosition(Descriptor layer, String name) throws LayerFormatException {
    Optional<String> text = layer.annotation(LayerFormat.ZSTD_CHUNKED_TARSPLIT_POSITION);
    if (text.isEmpty()) {
      return Optional.empty();
    }
    String[] parts = text.get().split(":");
    try {
      if (parts.length != 3) {
        throw new NumberFormatException();
      }
      Position p = new Position(Long.parseLong(parts[0]), Long.parseLong(parts[1]), Long.parseLong(parts[2]));
      if (p.offset() < 0 || p.length() <= 0 || p.uncompressed() < 0 || p.offset() > layer.size() - p.length()) {
        throw new LayerFormatException(
            name + ": tar-split position " + text.get() + " lies outside the blob of " + layer.size() + " bytes");
      }
      return Optional.of(p);
    } catch (NumberFormatException e) {
      throw new LayerFormatException(name + ": tar-split position '" + text.get() + "' is not offset:length:uncompressed");
    }
  }

  private static String annotation(Descriptor layer, String key, String legacyKey) {
    return layer.annotation(key).or(() -> layer.annotation(legacyKey)).orElse("");
  }

  static Position position(Descriptor layer, String name) throws LayerFormatException {
    String text = annotation(layer, LayerFormat.ZSTD_CHUNKED_MANIFEST_POSITION, LayerFormat.LEGACY_ZSTD_CHUNKED_MANIFEST_POSITION);
    String[] parts = text.split(":");
    if (parts.length != 4) {
      throw new LayerFormatException(name + ": manifest position '" + text + "' is not offset:length:uncompressed:type");
    }
    long offset;
    long length;
    long uncompressed;
    try {
      offset = Long.parseLong(parts[0]);
      length = Long.parseLong(parts[1]);
      uncompressed = Long.parseLong(parts[2]);
    } catch (NumberFormatException e) {
      throw new LayerFormatException(name + ": manifest position '" + text + "' has a non-numeric field", e);
    }
    if (!parts[3].equals("1")) {
      throw new LayerFormatException(name + ": manifest type " + parts[3] + " is not supported (only 1, JSON)");
    }
    if (offset < 0 || length <= 0 || uncompressed < 0 || offset > layer.size() - length) {
      throw new LayerFormatException(
          name + ": manifest position " + text + " lies outside the blob of " + layer.size() + " bytes");
    }
    return new Position(offset, length, uncompressed);
  }
}
