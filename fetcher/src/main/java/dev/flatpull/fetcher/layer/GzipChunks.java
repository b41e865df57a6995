package dev.flatpull.fetcher.layer;

import java.io.IOException;
import java.util.zip.DataFormatException;
import java.util.zip.Inflater;

/**
 * Decompresses an eStargz chunk (one or more gzip members) from the fetched bytes where they lie, with an inflater
 * kept by the decoding thread. A {@code GZIPInputStream} per chunk allocated a 64 KiB buffer, a CRC and a native zlib
 * stream for each 16 KiB chunk and copied every byte once more: in a cold start of nginx, 125 of the 242 MB the FUSE
 * manager allocated (young collections of 5-31 ms in the middle of the start, every FUSE operation waiting). The gzip
 * trailers' CRCs are not checked: every chunk's content is checked against its SHA-256 digest from the verified TOC
 * before anything reads it.
 */
final class GzipChunks {
  private static final int FTEXT = 1;
  private static final int FHCRC = 2;
  private static final int FEXTRA = 4;
  private static final int FNAME = 8;
  private static final int FCOMMENT = 16;
  private static final int TRAILER = 8;
  private static final ThreadLocal<Inflater> INFLATERS = ThreadLocal.withInitial(() -> new Inflater(true));

  private GzipChunks() {}

  /**
   * The {@code size} bytes that follow the first {@code skip} of the decompressed stream of the gzip members in
   * {@code in[off, off + len)}.
   *
   * @throws IOException when the bytes are not gzip, or end before {@code skip + size} decompressed bytes
   */
  static byte[] inflate(byte[] in, int off, int len, long skip, int size) throws IOException {
    byte[] out = new byte[size];
    Inflater inflater = INFLATERS.get();
    int end = off + len;
    int at = off;
    long toSkip = skip;
    int filled = 0;
    byte[] scratch = null;
    try {
      while (filled < size) {
        if (at >= end) {
          throw new IOException("gzip data ends after " + (skip - toSkip + filled) + " of " + (skip + size) + " bytes");
        }
        at = header(in, at, end);
        inflater.reset();
        inflater.setInput(in, at, end - at);
        while (filled < size && !inflater.finished()) {
          int n;
          if (toSkip > 0) {
            if (scratch == null) {
              scratch = new byte[(int) Math.min(toSkip, 64 * 1024)];
            }
            n = inflater.inflate(scratch, 0, (int) Math.min(toSkip, scratch.length));
            toSkip -= n;
          } else {
            n = inflater.inflate(out, filled, size - filled);
            filled += n;
          }
          if (n == 0 && (inflater.needsInput() || inflater.needsDictionary())) {
            throw new IOException("gzip member truncated");
          }
        }
        if (filled < size) {
          // The member ended: the next one starts after its trailer.
          at = end - inflater.getRemaining() + TRAILER;
        }
      }
      return out;
    } catch (DataFormatException e) {
      throw new IOException("invalid deflate data: " + e.getMessage(), e);
    } finally {
      inflater.reset();
    }
  }

  /** The offset of the deflate data after the gzip member header at {@code at} (RFC 1952). */
  private static int header(byte[] in, int at, int end) throws IOException {
    if (end - at < 10 || (in[at] & 0xff) != 0x1f || (in[at + 1] & 0xff) != 0x8b) {
      throw new IOException("not in gzip format");
    }
    if (in[at + 2] != 8) {
      throw new IOException("unsupported gzip compression method " + in[at + 2]);
    }
    int flags = in[at + 3] & 0xff;
    if ((flags & ~(FTEXT | FHCRC | FEXTRA | FNAME | FCOMMENT)) != 0) {
      throw new IOException("reserved gzip header flags set: " + flags);
    }
    int p = at + 10;
    if ((flags & FEXTRA) != 0) {
      if (end - p < 2) {
        throw new IOException("gzip header truncated");
      }
      p += 2 + ((in[p] & 0xff) | (in[p + 1] & 0xff) << 8);
    }
    if ((flags & FNAME) != 0) {
      p = afterZero(in, p, end);
    }
    if ((flags & FCOMMENT) != 0) {
      p = afterZero(in, p, end);
    }
    if ((flags & FHCRC) != 0) {
      p += 2;
    }
    if (p > end) {
      throw new IOException("gzip header truncated");
    }
    return p;
  }

  private static int afterZero(byte[] in, int p, int end) throws IOException {
    while (p < end) {
      if (in[p++] == 0) {
        return p;
      }
    }
    throw new IOException("gzip header truncated");
  }
}
