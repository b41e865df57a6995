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
    byte[] compressed = blob.read(new ByteRange(pos.offset(), pos.length()));
    Digest actual = expected.recompute(compressed, 0, compressed.length);
    if (!actual.equals(expected)) {
      throw new DigestMismatchException(name + " TOC", expected, actual);
    }
    byte[] json;
    try (InputStream in =
        new BoundedInputStream(new ZstdInputStream(new ByteArrayInputStream(compressed)), name + ": TOC", pos.uncompressed())) {
      json = in.readAllBytes();
    } catch (SizeLimitExceededException e) {
      throw new LayerFormatException(name + ": TOC decompresses to more than the announced " + pos.uncompressed() + " bytes", e);
    } catch (IOException e) {
      throw new LayerFormatException(name + ": TOC is not a valid zstd frame: " + e.getMessage(), e);
    }
    if (json.length != pos.uncompressed()) {
      throw new LayerFormatException(
          name + ": TOC decompresses to " + json.length + " bytes, the annotation says " + pos.uncompressed());
    }
    return TocParser.parse(
        json, name, LayerFormat.ZSTD_CHUNKED, layer.digest(), Optional.of(expected), ChunkCompression.ZSTD,
        pos.offset(), limits);
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
