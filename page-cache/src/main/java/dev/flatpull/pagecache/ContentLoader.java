package dev.flatpull.pagecache;

import dev.flatpull.core.VerifiedContent;
import java.io.IOException;

/**
 * Produces content on a cache miss (for a layer chunk: fetch, decompress, verify). It returns verified content, which
 * the cache only checks to be of the digest it asked for, without hashing it again.
 */
@FunctionalInterface
public interface ContentLoader {
  VerifiedContent load() throws IOException;
}
