package dev.flatpull.fuse;

import dev.flatpull.core.Digest;
import java.util.Optional;

/**
 * Content that arrives page by page rather than as the TOC's chunks: a page-mode runtime image (verified against its
 * own page digests, docs/runtime-images.md). A read whose chunk is missing takes the pages it needs from here when
 * every one of them is known, and the chunk from the lazy loader otherwise. Thread-safe.
 */
@FunctionalInterface
public interface PageSource {
  /** The page size pages are addressed in. */
  int PAGE_SIZE = 4096;

  PageSource NONE = (file, page) -> Optional.empty();

  /**
   * The digest under which the page cache holds (or a producer has reserved) page {@code page} (its offset divided by
   * {@link #PAGE_SIZE}) of {@code file}, a regular file's content entry name in the layer index.
   */
  Optional<Digest> page(String file, long page);
}
