package dev.flatpull.fetcher.layer;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.BoundedInputStream;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarReader;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Optional;
import java.util.zip.GZIPInputStream;

/**
 * Reads an eStargz layer's TOC: the footer (51 bytes; the 47-byte legacy stargz footer too) gives the TOC offset, the
 * TOC is a gzip member holding a tar entry {@code stargz.index.json}, and its JSON must hash to the layer descriptor's
 * {@code containerd.io/snapshot/stargz/toc.digest}. The tail of the blob is fetched in one request, which usually
 * holds the whole TOC.
 */
public final class EstargzToc {
  public static final String TOC_NAME = "stargz.index.json";
  public static final int FOOTER_SIZE = 51;
  static final int LEGACY_FOOTER_SIZE = 47;
  private static final int TAIL_WINDOW = 64 * 1024;

  private EstargzToc() {}

  /** Fetches, verifies and parses the TOC of an eStargz layer. */
  public static LayerIndex read(Descriptor layer, BlobReader blob, FetchLimits limits) throws IOException {
    String name = "eStargz layer " + layer.digest();
    Digest expected = annotatedDigest(layer, name);
    long size = layer.size();
    if (size < LEGACY_FOOTER_SIZE) {
      throw new LayerFormatException(name + ": blob of " + size + " bytes is too small for a footer");
    }
    long windowStart = size - Math.min(size, TAIL_WINDOW);
    long annotated = layer.annotation(LayerFormat.ESTARGZ_TOC_OFFSET).map(EstargzToc::offsetOrMinusOne).orElse(-1L);
    if (annotated >= 0 && annotated < windowStart && size - annotated <= limits.maxTocBytes()) {
      windowStart = annotated;
    }
    byte[] tail = blob.read(ByteRange.between(windowStart, size));
    int footerSize = FOOTER_SIZE;
    long tocOffset = size >= FOOTER_SIZE ? parseFooter(tail, tail.length - FOOTER_SIZE, true) : -1;
    if (tocOffset < 0) {
      footerSize = LEGACY_FOOTER_SIZE;
      tocOffset = parseFooter(tail, tail.length - LEGACY_FOOTER_SIZE, false);
    }
    if (tocOffset < 0) {
      throw new LayerFormatException(name + ": no eStargz footer at the end of the blob");
    }
    long tocEnd = size - footerSize;
    if (tocOffset >= tocEnd) {
      throw new LayerFormatException(
          name + ": footer points at TOC offset " + tocOffset + ", outside the blob's data area [0, " + tocEnd + ")");
    }
    if (tocEnd - tocOffset > limits.maxTocBytes()) {
      throw new dev.flatpull.core.SizeLimitExceededException(name + ": compressed TOC", limits.maxTocBytes());
    }
    byte[] compressed;
    if (tocOffset >= windowStart) {
      compressed = java.util.Arrays.copyOfRange(tail, (int) (tocOffset - windowStart), (int) (tocEnd - windowStart));
    } else {
      byte[] head = blob.read(ByteRange.between(tocOffset, windowStart));
      compressed = new byte[(int) (tocEnd - tocOffset)];
      System.arraycopy(head, 0, compressed, 0, head.length);
      System.arraycopy(tail, 0, compressed, head.length, (int) (tocEnd - windowStart));
    }
    byte[] tocMember = compressed;
    // Streamed, twice: a TOC of a million entries is hundreds of MiB of JSON, and its gzip member a few.
    return TocParser.parse(() -> openToc(tocMember, name, limits), Optional.of(expected), name, LayerFormat.ESTARGZ,
        layer.digest(), Optional.of(expected), ChunkCompression.GZIP, tocOffset, limits);
  }

  private static long offsetOrMinusOne(String text) {
    try {
      return Long.parseLong(text);
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  private static Digest annotatedDigest(Descriptor layer, String name) throws LayerFormatException {
    String v =
        layer.annotation(LayerFormat.ESTARGZ_TOC_DIGEST)
            .orElseThrow(() -> new LayerFormatException(name + ": descriptor lacks " + LayerFormat.ESTARGZ_TOC_DIGEST));
    try {
      return Digest.parse(v);
    } catch (IllegalArgumentException e) {
      throw new LayerFormatException(name + ": annotation " + LayerFormat.ESTARGZ_TOC_DIGEST + ": " + e.getMessage(), e);
    }
  }

  /** The TOC offset encoded in a footer at {@code off}, or -1 when the bytes there are not such a footer. */
  static long parseFooter(byte[] b, int off, boolean withSubfield) {
    if (off < 0 || b[off] != 0x1f || (b[off + 1] & 0xff) != 0x8b || b[off + 2] != 8 || (b[off + 3] & 4) == 0) {
      return -1;
    }
    int xlen = (b[off + 10] & 0xff) | ((b[off + 11] & 0xff) << 8);
    int p = off + 12;
    if (withSubfield) {
      if (xlen != 26 || b[p] != 'S' || b[p + 1] != 'G' || b[p + 2] != 22 || b[p + 3] != 0) {
        return -1;
      }
      p += 4;
    } else if (xlen != 22) {
      return -1;
    }
    String payload = new String(b, p, 22, StandardCharsets.US_ASCII);
    if (!payload.endsWith("STARGZ")) {
      return -1;
    }
    try {
      return Long.parseUnsignedLong(payload.substring(0, 16), 16);
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  /** The 51-byte footer pointing at {@code tocOffset}. */
  public static byte[] footer(long tocOffset) {
    byte[] f = new byte[FOOTER_SIZE];
    f[0] = 0x1f;
    f[1] = (byte) 0x8b;
    f[2] = 8;
    f[3] = 4; // FEXTRA
    f[9] = (byte) 0xff; // OS unknown
    f[10] = 26;
    f[12] = 'S';
    f[13] = 'G';
    f[14] = 22;
    byte[] payload = String.format("%016xSTARGZ", tocOffset).getBytes(StandardCharsets.US_ASCII);
    System.arraycopy(payload, 0, f, 16, 22);
    // An empty final stored block, then CRC32 and ISIZE of nothing (zeros).
    f[38] = 1;
    f[41] = (byte) 0xff;
    f[42] = (byte) 0xff;
    return f;
  }

  /** The TOC's JSON, decompressed as it is read; gzip and tar errors become layer-format errors naming the layer. */
  private static InputStream openToc(byte[] compressed, String name, FetchLimits limits) throws IOException {
    InputStream in = null;
    try {
      in = new BoundedInputStream(new GZIPInputStream(new ByteArrayInputStream(compressed), 64 * 1024),
          name + ": TOC", limits.maxTocBytes() + 4096);
      TarReader tar = new TarReader(in);
      TarHeader h;
      while ((h = tar.next()) != null) {
        if (h.name().equals(TOC_NAME) || h.name().equals("./" + TOC_NAME)) {
          return new TocStream(tar.data(), in, name, h.size());
        }
      }
    } catch (IOException e) {
      if (in != null) {
        in.close();
      }
      throw TocStream.mapped(e, name);
    }
    in.close();
    throw new LayerFormatException(name + ": TOC member has no " + TOC_NAME + " entry");
  }

  /** The TOC entry's data, closing the whole member when done and naming gzip and tar failures. */
  private static final class TocStream extends java.io.FilterInputStream implements TocParser.Sized {
    private final InputStream member;
    private final String name;
    private final long length;

    TocStream(InputStream data, InputStream member, String name, long length) {
      super(data);
      this.member = member;
      this.name = name;
      this.length = length;
    }

    /** The JSON's length as the tar entry's header gives it. */
    @Override
    public long length() {
      return length;
    }

    static IOException mapped(IOException e, String name) {
      if (e instanceof java.util.zip.ZipException || e instanceof java.io.EOFException) {
        return new LayerFormatException(name + ": TOC is not a valid gzip member: " + e.getMessage(), e);
      }
      if (e instanceof TarReader.TarFormatException) {
        return new LayerFormatException(name + ": TOC tar: " + e.getMessage(), e);
      }
      return e;
    }

    @Override
    public int read() throws IOException {
      try {
        return super.read();
      } catch (IOException e) {
        throw mapped(e, name);
      }
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      try {
        return super.read(b, off, len);
      } catch (IOException e) {
        throw mapped(e, name);
      }
    }

    @Override
    public void close() throws IOException {
      member.close();
    }
  }
}
