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
      byte[] b = new byte[64 * 1024 + r.nextInt(512 * 1024)];
      r.nextBytes(b);
      cache.put(Digest.sha256(b), b);
    }
  }
}
