package dev.flatpull.pagecache;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.core.Digest;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Optional;
import java.util.Random;

/** Writes random entries into a page cache as fast as it can until killed; the crash-safety test kills it. */
public final class CacheWriterProcess {
  private CacheWriterProcess() {}

  public static void main(String[] args) throws Exception {
    PageCache cache = PageCache.open(Path.of(args[0]),
        new CacheSettings(Optional.empty(), 0, Long.MAX_VALUE, Duration.ofSeconds(1)));
    Random r = new Random(Long.parseLong(args[1]));
    System.out.println("ready");
    System.out.flush();
    while (true) {
      byte[] b = next(r);
      cache.put(Digest.sha256(b), b);
    }
  }

  private static byte[] next(Random r) {
    byte[] b = new byte[64 * 1024 + r.nextInt(512 * 1024)];
    r.nextBytes(b);
    return b;
  }

  /** The first {@code n} entries the process writes with {@code seed}, in its order. */
  static java.util.List<byte[]> entries(long seed, int n) {
    Random r = new Random(seed);
    java.util.List<byte[]> all = new java.util.ArrayList<>();
    for (int i = 0; i < n; i++) {
      all.add(next(r));
    }
    return all;
  }
}
