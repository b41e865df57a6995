package dev.flatpull.fuse;

import java.io.InterruptedIOException;

/**
 * Producers about to reserve content in the page cache: a runtime-image stream whose index is still on its way. A
 * read that misses asks first, so that it waits for content already in flight rather than fetching it a second time;
 * the wait is bounded (the stream's stall), so a slow index costs a read little.
 */
@FunctionalInterface
public interface PendingProducers {
  PendingProducers NONE = () -> {};

  /** Returns once no producer is about to reserve content, or after a bounded wait. */
  void awaitAnnounced() throws InterruptedIOException;
}
