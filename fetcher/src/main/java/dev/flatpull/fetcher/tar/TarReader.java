package dev.flatpull.fetcher.tar;

import dev.flatpull.core.BoundedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A streaming reader of ustar, PAX and GNU (long name/link) tar archives. It knows the stream offset of each entry's
 * data, which is how a plain layer is indexed. Not thread-safe.
 */
public final class TarReader {
  private static final int BLOCK = 512;
  private static final int MAX_META = 1 << 20;

  private final InputStream in;
  private long position;
  private long remaining;
  private long padding;
  private long dataOffset = -1;
  private boolean ended;

  public TarReader(InputStream in) {
    this.in = in;
  }

  /**
   * Advances to the next entry, skipping the rest of the current one.
   *
   * @return the next header, or null at the end of the archive
   * @throws TarFormatException for bad checksums, bad numbers, unsupported (sparse) entries and truncation
   */
  public TarHeader next() throws IOException {
    skip(remaining + padding);
    remaining = 0;
    padding = 0;
    if (ended) {
      return null;
    }
    Map<String, byte[]> pax = new LinkedHashMap<>();
    String longName = null;
    String longLink = null;
    while (true) {
      byte[] h = new byte[BLOCK];
      int n = in.readNBytes(h, 0, BLOCK);
      if (n == 0) {
        ended = true;
        return null;
      }
      long headerAt = position;
      position += n;
      if (n < BLOCK) {
        throw new TarFormatException("archive truncated inside a header at offset " + headerAt);
      }
      if (isZero(h)) {
        ended = true;
        return null;
      }
      verifyChecksum(h, headerAt);
      char type = (char) (h[156] & 0xff);
      long size = number(h, 124, 12, headerAt, "size");
      if (size < 0) {
        throw new TarFormatException("negative size in header at offset " + headerAt);
      }
      switch (type) {
        case 'x', 'g', 'L', 'K' -> {
          if (size > MAX_META) {
            throw new TarFormatException("metadata record of " + size + " bytes at offset " + headerAt + " is too large");
          }
          byte[] data = readData(size);
          if (type == 'x') {
            parsePax(data, pax, headerAt);
          } else if (type == 'L') {
            longName = cString(data, 0, data.length);
          } else if (type == 'K') {
            longLink = cString(data, 0, data.length);
          }
          continue;
        }
        case 'S' -> throw new TarFormatException("sparse file at offset " + headerAt + " is not supported");
        default -> {}
      }
      String name = cString(h, 0, 100);
      if (isUstar(h)) {
        String prefix = cString(h, 345, 155);
        if (!prefix.isEmpty()) {
          name = prefix + "/" + name;
        }
      }
      if (longName != null) {
        name = longName;
      }
      String link = longLink != null ? longLink : cString(h, 157, 100);
      long uid = number(h, 108, 8, headerAt, "uid");
      long gid = number(h, 116, 8, headerAt, "gid");
      long mtime = number(h, 136, 12, headerAt, "mtime");
      String uname = cString(h, 265, 32);
      String gname = cString(h, 297, 32);
      Map<String, byte[]> xattrs = new LinkedHashMap<>();
      for (Map.Entry<String, byte[]> e : pax.entrySet()) {
        String k = e.getKey();
        String v = new String(e.getValue(), StandardCharsets.UTF_8);
        switch (k) {
          case "path" -> name = v;
          case "linkpath" -> link = v;
          case "size" -> size = parsePaxLong(v, k, headerAt);
          case "uid" -> uid = parsePaxLong(v, k, headerAt);
          case "gid" -> gid = parsePaxLong(v, k, headerAt);
          case "uname" -> uname = v;
          case "gname" -> gname = v;
          case "mtime" -> mtime = (long) Double.parseDouble(v);
          default -> {
            if (k.startsWith("SCHILY.xattr.")) {
              xattrs.put(k.substring("SCHILY.xattr.".length()), e.getValue());
            }
          }
        }
      }
      if (type == '\0' || type == '7') {
        type = TarHeader.REG;
      }
      if (name.endsWith("/") && type == TarHeader.REG) {
        type = TarHeader.DIR;
      }
      long dataSize = (type == TarHeader.REG) ? size : (type == TarHeader.HARDLINK || type == TarHeader.SYMLINK || type == TarHeader.DIR) ? 0 : size;
      dataOffset = position;
      remaining = dataSize;
      padding = (BLOCK - (dataSize % BLOCK)) % BLOCK;
      int mode = (int) (number(h, 100, 8, headerAt, "mode") & 07777);
      int devMajor = (int) number(h, 329, 8, headerAt, "devmajor");
      int devMinor = (int) number(h, 337, 8, headerAt, "devminor");
      return new TarHeader(
          name, type, type == TarHeader.REG ? size : 0, mode, uid, gid, uname, gname, Instant.ofEpochSecond(mtime),
          link, devMajor, devMinor, xattrs);
    }
  }

  /** The stream offset of the current entry's data. */
  public long dataOffset() {
    return dataOffset;
  }

  /** The stream offset just past the last byte consumed. */
  public long position() {
    return position;
  }

  /** The current entry's data; reading past its size returns end of stream. The stream is not to be closed. */
  public InputStream data() {
    return new InputStream() {
      @Override
      public int read() throws IOException {
        byte[] one = new byte[1];
        return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
      }

      @Override
      public int read(byte[] b, int off, int len) throws IOException {
        if (remaining == 0) {
          return -1;
        }
        int n = in.read(b, off, (int) Math.min(len, remaining));
        if (n < 0) {
          throw new TarFormatException("archive truncated inside entry data at offset " + position);
        }
        remaining -= n;
        position += n;
        return n;
      }
    };
  }

  private byte[] readData(long size) throws IOException {
    byte[] data = new BoundedInputStream(in, "tar metadata", MAX_META).readNBytes((int) size);
    if (data.length < size) {
      throw new TarFormatException("archive truncated inside a metadata record at offset " + position);
    }
    position += size;
    long pad = (BLOCK - (size % BLOCK)) % BLOCK;
    skip(pad);
    return data;
  }

  private void skip(long n) throws IOException {
    long left = n;
    while (left > 0) {
      long s = in.skip(left);
      if (s <= 0) {
        if (in.read() < 0) {
          throw new TarFormatException("archive truncated at offset " + position);
        }
        s = 1;
      }
      left -= s;
      position += s;
    }
  }

  private static boolean isZero(byte[] h) {
    for (byte b : h) {
      if (b != 0) {
        return false;
      }
    }
    return true;
  }

  private static boolean isUstar(byte[] h) {
    return h[257] == 'u' && h[258] == 's' && h[259] == 't' && h[260] == 'a' && h[261] == 'r';
  }

  private static void verifyChecksum(byte[] h, long at) throws TarFormatException {
    long unsigned = 0;
    long signed = 0;
    for (int i = 0; i < BLOCK; i++) {
      byte b = (i >= 148 && i < 156) ? (byte) ' ' : h[i];
      unsigned += b & 0xff;
      signed += b;
    }
    long stored = number(h, 148, 8, at, "checksum");
    if (stored != unsigned && stored != signed) {
      throw new TarFormatException("bad header checksum at offset " + at + " (not a tar archive, or corrupt)");
    }
  }

  static long number(byte[] h, int off, int len, long at, String field) throws TarFormatException {
    if ((h[off] & 0x80) != 0) {
      // GNU base-256: big-endian two's complement, first byte's top bit is the marker.
      long v = h[off] & 0x3f;
      if ((h[off] & 0x40) != 0) {
        throw new TarFormatException("negative base-256 " + field + " in header at offset " + at);
      }
      for (int i = 1; i < len; i++) {
        if (v > (Long.MAX_VALUE >> 8)) {
          throw new TarFormatException(field + " overflows in header at offset " + at);
        }
        v = (v << 8) | (h[off + i] & 0xff);
      }
      return v;
    }
    long v = 0;
    int i = off;
    int end = off + len;
    while (i < end && (h[i] == ' ' || h[i] == 0)) {
      i++;
    }
    for (; i < end && h[i] != 0 && h[i] != ' '; i++) {
      if (h[i] < '0' || h[i] > '7') {
        throw new TarFormatException("bad octal " + field + " in header at offset " + at);
      }
      v = (v << 3) | (h[i] - '0');
    }
    return v;
  }

  private static long parsePaxLong(String v, String key, long at) throws TarFormatException {
    try {
      return Long.parseLong(v.trim());
    } catch (NumberFormatException e) {
      throw new TarFormatException("bad PAX " + key + " '" + v + "' before header at offset " + at);
    }
  }

  private static void parsePax(byte[] data, Map<String, byte[]> out, long at) throws TarFormatException {
    int i = 0;
    while (i < data.length) {
      int sp = i;
      while (sp < data.length && data[sp] != ' ') {
        sp++;
      }
      if (sp >= data.length) {
        break;
      }
      int len;
      try {
        len = Integer.parseInt(new String(data, i, sp - i, StandardCharsets.US_ASCII));
      } catch (NumberFormatException e) {
        throw new TarFormatException("bad PAX record length at offset " + at);
      }
      if (len <= sp - i || i + len > data.length) {
        throw new TarFormatException("bad PAX record length at offset " + at);
      }
      int eq = sp + 1;
      while (eq < i + len && data[eq] != '=') {
        eq++;
      }
      if (eq >= i + len) {
        throw new TarFormatException("PAX record without '=' at offset " + at);
      }
      String key = new String(data, sp + 1, eq - sp - 1, StandardCharsets.UTF_8);
      out.put(key, Arrays.copyOfRange(data, eq + 1, i + len - 1));
      i += len;
    }
  }

  private static String cString(byte[] b, int off, int len) {
    int end = off;
    while (end < off + len && b[end] != 0) {
      end++;
    }
    return new String(b, off, end - off, StandardCharsets.UTF_8);
  }

  /** Thrown for a malformed archive. */
  public static final class TarFormatException extends IOException {
    public TarFormatException(String message) {
      super(message);
    }
  }
}
