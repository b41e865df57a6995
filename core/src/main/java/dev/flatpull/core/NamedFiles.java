package dev.flatpull.core;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.util.Optional;

/**
 * Files a node keeps under names of their own, beside its content-addressed page cache and in the same disk budget:
 * data derived from verified content (a layer's parsed index), which its owner checks when it opens one. A file is
 * written whole before it is found under its name, so that a killed process leaves either none or a complete one; the
 * least recently found are evicted with the cache's content when the budget is exceeded.
 */
public interface NamedFiles {
  /** Writes a file's content; the channel is positioned at 0 and may be written at any position. */
  @FunctionalInterface
  interface Writer {
    void write(FileChannel file) throws IOException;
  }

  /** The file kept as {@code name}, if any (a use, for eviction). A caller must cope with its removal at any time. */
  Optional<Path> find(String name) throws IOException;

  /** Writes a file through {@code writer} and keeps it as {@code name}, replacing one of that name. */
  void keep(String name, Writer writer) throws IOException;

  /** Removes the file kept as {@code name}; nothing when there is none. */
  void remove(String name) throws IOException;

  /** Keeps nothing: every {@link #find} misses. */
  NamedFiles NONE = new NamedFiles() {
    @Override
    public Optional<Path> find(String name) {
      return Optional.empty();
    }

    @Override
    public void keep(String name, Writer writer) {}

    @Override
    public void remove(String name) {}
  };
}
