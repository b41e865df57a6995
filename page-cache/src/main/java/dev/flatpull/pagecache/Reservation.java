package dev.flatpull.pagecache;

import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.VerifiedContent;

/**
 * A promise by a producer (the runtime-image stream) to supply one entry soon. Readers of the digest wait for it
 * instead of fetching it themselves, up to the configured reservation wait. A producer must call exactly one of
 * {@link #fill} or {@link #abandon}; readers of an abandoned reservation fetch the content themselves.
 */
public interface Reservation {
  /**
   * Stores verified content of the reserved digest and wakes the waiting readers. A producer with raw bytes makes the
   * content with {@link VerifiedContent#check}.
   *
   * @throws DigestMismatchException when the content is of another digest; the reservation is then abandoned
   */
  void fill(VerifiedContent content) throws DigestMismatchException;

  /** Gives the entry up; waiting readers fall back to their own loader. */
  void abandon();
}
