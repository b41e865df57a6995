package dev.flatpull.pagecache;

import java.io.IOException;

/** Produces content on a cache miss (for a layer chunk: fetch, decompress). Its result is verified by the cache. */
@FunctionalInterface
public interface ContentLoader {
  byte[] load() throws IOException;
}
