package dev.flatpull.pagecache;

import dev.flatpull.core.DigestMismatchException;

/**
 * A promise by a producer (the runtime-image stream) to supply one entry soon. Readers of the digest wait for it
 * instead of fetching it themselves, up to the configured reservation wait. A producer must call exactly one of
 * {@link #fill} or {@link #abandon}; readers of an abandoned reservation fetch the content themselves.
 */
public interface Reservation {
  /** Verifies {@code bytes} against the reserved digest, stores them and wakes the waiting readers. */
  void fill(byte[] bytes) throws DigestMismatchException;

  /** Gives the entry up; waiting readers fall back to their own loader. */
  void abandon();
}
