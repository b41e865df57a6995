package dev.flatpull.core;

/**
 * What a long command tells its user as it goes (a conversion, a runtime image's build): a line per step, and the
 * bytes done of the step in progress, so that a command line can show rate and time left. Called on the working
 * thread; must not throw.
 */
public interface Progress {
  /** Nothing shown. */
  Progress NONE = line -> {};

  /** A step begins or ends: one human-readable line. */
  void step(String line);

  /** {@code done} of {@code total} bytes of {@code what} (a layer's download or conversion, chunks fetched). */
  default void bytes(String what, long done, long total) {}

  /** The state of a step without a known total (a wait), replacing the one before: one human-readable line. */
  default void status(String line) {}
}
