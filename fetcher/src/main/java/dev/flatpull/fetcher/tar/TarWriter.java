package dev.flatpull.fetcher.tar;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * Writes tar headers in the ustar format, preceded by a PAX record when a value does not fit ustar (long or non-ASCII
 * names, large sizes or ids, extended attributes). It writes to whatever stream it is given for each call, because
 * the lazy formats start a new gzip member or zstd frame at chosen entry boundaries.
 */
public final class TarWriter {
  public static final int BLOCK = 512;
  private static final long MAX_OCTAL_SIZE = 077777777777L;
  private static final long MAX_OCTAL_ID = 07777777L;

  private TarWriter() {}

  /** Writes the header of {@code h} (with a PAX record first when needed). */
  public static void writeHeader(OutputStream out, TarHeader h) throws IOException {
    byte[] paxBinary = paxRecords(h);
    String name = h.type() == TarHeader.DIR && !h.name().endsWith("/") ? h.name() + "/" : h.name();
    boolean needPax = paxBinary.length > 0;
    if (!fits(name, 100)) {
      needPax = true;
    }
    if (!fits(h.linkName(), 100) || h.size() > MAX_OCTAL_SIZE || h.uid() > MAX_OCTAL_ID || h.gid() > MAX_OCTAL_ID
        || !fits(h.userName(), 32) || !fits(h.groupName(), 32)) {
      needPax = true;
    }
    if (needPax) {
      java.io.ByteArrayOutputStream records = new java.io.ByteArrayOutputStream();
      if (!fits(name, 100)) {
        records.writeBytes(record("path", name.getBytes(StandardCharsets.UTF_8)));
      }
      if (!fits(h.linkName(), 100)) {
        records.writeBytes(record("linkpath", h.linkName().getBytes(StandardCharsets.UTF_8)));
      }
      if (h.size() > MAX_OCTAL_SIZE) {
        records.writeBytes(record("size", Long.toString(h.size()).getBytes(StandardCharsets.US_ASCII)));
      }
      if (h.uid() > MAX_OCTAL_ID) {
        records.writeBytes(record("uid", Long.toString(h.uid()).getBytes(StandardCharsets.US_ASCII)));
      }
      if (h.gid() > MAX_OCTAL_ID) {
        records.writeBytes(record("gid", Long.toString(h.gid()).getBytes(StandardCharsets.US_ASCII)));
      }
      if (!fits(h.userName(), 32)) {
        records.writeBytes(record("uname", h.userName().getBytes(StandardCharsets.UTF_8)));
      }
      if (!fits(h.groupName(), 32)) {
        records.writeBytes(record("gname", h.groupName().getBytes(StandardCharsets.UTF_8)));
      }
      records.writeBytes(paxBinary);
      byte[] data = records.toByteArray();
      String paxName = "PaxHeaders.0/" + baseName(name);
      out.write(block(truncate(paxName, 100), 'x', data.length, 0644, 0, 0, "", "", h.modTime().getEpochSecond(), "", 0, 0));
      out.write(data);
      pad(out, data.length);
    }
    out.write(block(
        truncate(name, 100), h.type(), h.isRegular() ? h.size() : 0, h.mode(), Math.min(h.uid(), MAX_OCTAL_ID),
        Math.min(h.gid(), MAX_OCTAL_ID), truncate(h.userName(), 32), truncate(h.groupName(), 32),
        Math.max(0, h.modTime().getEpochSecond()), truncate(h.linkName(), 100), h.devMajor(), h.devMinor()));
  }

  /** Writes the entry {@code h} whole: its header, {@code content} (empty for all but regular files) and padding. */
  public static void writeEntry(OutputStream out, TarHeader h, byte[] content) throws IOException {
    writeHeader(out, h);
    out.write(content);
    pad(out, content.length);
  }

  /** Zero bytes that round {@code size} up to a whole block. */
  public static void pad(OutputStream out, long size) throws IOException {
    int p = (int) ((BLOCK - (size % BLOCK)) % BLOCK);
    if (p > 0) {
      out.write(new byte[p]);
    }
  }

  /** The two zero blocks that end an archive. */
  public static void writeEnd(OutputStream out) throws IOException {
    out.write(new byte[2 * BLOCK]);
  }

  private static byte[] paxRecords(TarHeader h) {
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    for (Map.Entry<String, byte[]> x : new java.util.TreeMap<>(h.xattrs()).entrySet()) {
      out.writeBytes(record("SCHILY.xattr." + x.getKey(), x.getValue()));
    }
    return out.toByteArray();
  }

  /** A PAX record {@code "LEN key=value\n"}, where LEN counts the whole record including its own digits. */
  private static byte[] record(String key, byte[] value) {
    byte[] k = key.getBytes(StandardCharsets.UTF_8);
    int base = 1 + k.length + 1 + value.length + 1;
    int len = base + 1;
    while (len != base + Integer.toString(len).length()) {
      len = base + Integer.toString(len).length();
    }
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream(len);
    out.writeBytes((len + " ").getBytes(StandardCharsets.US_ASCII));
    out.writeBytes(k);
    out.write('=');
    out.writeBytes(value);
    out.write('\n');
    return out.toByteArray();
  }

  private static boolean fits(String s, int max) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    if (b.length > max) {
      return false;
    }
    for (byte x : b) {
      if (x < 0) {
        return false;
      }
    }
    return true;
  }

  private static String truncate(String s, int max) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    return b.length <= max ? s : new String(b, 0, max, StandardCharsets.ISO_8859_1);
  }

  private static String baseName(String name) {
    String n = name.endsWith("/") ? name.substring(0, name.length() - 1) : name;
    int slash = n.lastIndexOf('/');
    return slash < 0 ? n : n.substring(slash + 1);
  }

  private static byte[] block(
      String name, char type, long size, int mode, long uid, long gid, String uname, String gname, long mtime,
      String link, int devMajor, int devMinor) {
    byte[] h = new byte[BLOCK];
    put(h, 0, 100, name);
    octal(h, 100, 8, mode & 07777);
    octal(h, 108, 8, uid);
    octal(h, 116, 8, gid);
    octal(h, 124, 12, size);
    octal(h, 136, 12, Math.min(mtime, 077777777777L));
    h[156] = (byte) type;
    put(h, 157, 100, link);
    put(h, 257, 6, "ustar");
    h[263] = '0';
    h[264] = '0';
    put(h, 265, 32, uname);
    put(h, 297, 32, gname);
    if (type == TarHeader.CHAR || type == TarHeader.BLOCK) {
      octal(h, 329, 8, devMajor);
      octal(h, 337, 8, devMinor);
    }
    for (int i = 148; i < 156; i++) {
      h[i] = ' ';
    }
    long sum = 0;
    for (byte b : h) {
      sum += b & 0xff;
    }
    String cs = String.format("%06o", sum);
    put(h, 148, 6, cs);
    h[154] = 0;
    h[155] = ' ';
    return h;
  }

  private static void put(byte[] h, int off, int len, String s) {
    byte[] b = s.getBytes(s.chars().allMatch(c -> c < 256) ? StandardCharsets.ISO_8859_1 : StandardCharsets.UTF_8);
    System.arraycopy(b, 0, h, off, Math.min(len, b.length));
  }

  private static void octal(byte[] h, int off, int len, long v) {
    String s = Long.toOctalString(v);
    String padded = "0".repeat(Math.max(0, len - 1 - s.length())) + s;
    put(h, off, len - 1, padded);
    h[off + len - 1] = 0;
  }
}
