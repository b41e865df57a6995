package dev.flatpull.fetcher.convert;

/**
 * What a long conversion tells its user as it goes: a line per step, and the bytes done of the step in progress, so
 * that a command line can show rate and time left. Called on the converting thread; must not throw.
 */
public interface ConvertProgress {
  /** Nothing shown. */
  ConvertProgress NONE = line -> {};

  /** A step begins or ends: one human-readable line. */
  void step(String line);

  /** {@code done} of {@code total} bytes of {@code what} (a layer's download, decompression or conversion). */
  default void bytes(String what, long done, long total) {}
}
