package dev.flatpull.fetcher.layer;

import dev.flatpull.core.Digest;
import java.security.MessageDigest;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Digests of runs of zero bytes, the only thing that vouches for a zstd:chunked {@code zeros} chunk (served without a
 * fetch). containers/storage marks runs of at least 1 KiB inside a file's content-defined chunks, so a layer repeats
 * a few sizes many times: each is hashed once.
 */
final class ZeroRuns {
  private static final byte[] ZEROS = new byte[64 << 10];
  private static final int REMEMBERED = 4096;
  private static final Map<String, Digest> KNOWN = new ConcurrentHashMap<>();

  private ZeroRuns() {}

  /** The digest of {@code length} zero bytes under {@code algorithm}. */
  static Digest digest(String algorithm, long length) {
    String key = algorithm + ":" + length;
    Digest d = KNOWN.get(key);
    if (d != null) {
      return d;
    }
    MessageDigest md = Digest.newMessageDigest(algorithm);
    for (long left = length; left > 0; left -= ZEROS.length) {
      md.update(ZEROS, 0, (int) Math.min(ZEROS.length, left));
    }
    d = Digest.of(algorithm, md);
    if (KNOWN.size() >= REMEMBERED) {
      KNOWN.clear();
    }
    KNOWN.put(key, d);
    return d;
  }
}
