package dev.flatpull.fetcher.convert;

/** CRC-64 with the ISO polynomial, as tar-split records file contents (Go's {@code crc64.ISO}). */
final class Crc64 {
  private static final long[] TABLE = new long[256];

  static {
    long poly = 0xD800000000000000L;
    for (int i = 0; i < 256; i++) {
      long crc = i;
      for (int j = 0; j < 8; j++) {
        crc = (crc & 1) == 1 ? (crc >>> 1) ^ poly : crc >>> 1;
      }
      TABLE[i] = crc;
    }
  }

  private long crc = ~0L;

  void update(byte[] b, int off, int len) {
    long c = crc;
    for (int i = off; i < off + len; i++) {
      c = TABLE[(int) ((c ^ b[i]) & 0xff)] ^ (c >>> 8);
    }
    crc = c;
  }

  /** The checksum as 8 big-endian bytes. */
  byte[] sum() {
    long v = ~crc;
    byte[] out = new byte[8];
    for (int i = 7; i >= 0; i--) {
      out[i] = (byte) v;
      v >>>= 8;
    }
    return out;
  }
}
