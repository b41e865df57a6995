package dev.flatpull.fuse;

import dev.flatpull.core.Digest;

/**
 * Observes where the content a read served came from, chunk by chunk, so that the FUSE manager can say how much of a
 * start the runtime image served. Called on FUSE threads: implementations must be fast, thread-safe, and not throw.
 */
@FunctionalInterface
public interface ContentEvents {
  ContentEvents NONE = (content, bytes, origin) -> {};

  /** Where a chunk was when a read needed it. */
  enum Origin {
    /** In the page cache already. */
    PRESENT,
    /** Missing, then brought by someone else the read waited for (a runtime-image stream, another read). */
    WAITED,
    /** Fetched from the registry by this read. */
    FETCHED
  }

  /** A read served {@code bytes} of the chunk whose content is {@code content}. */
  void served(Digest content, int bytes, Origin origin);
}
