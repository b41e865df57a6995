package dev.flatpull.it;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.Deque;

/**
 * Closes what a test class started, last started first (mounts before the caches and clients they read through,
 * those before the registry, the work directory last), and keeps going when one of them fails.
 */
public final class Cleanup implements AutoCloseable {
  private final Deque<AutoCloseable> stack = new ArrayDeque<>();

  public <T extends AutoCloseable> T add(T resource) {
    stack.push(resource);
    return resource;
  }

  /** Deletes {@code dir} at cleanup; returns it. */
  public Path deleteLater(Path dir) {
    add(() -> Processes.deleteTree(dir));
    return dir;
  }

  @Override
  public void close() throws IOException {
    IOException first = null;
    while (!stack.isEmpty()) {
      try {
        stack.pop().close();
      } catch (Exception e) {
        if (e instanceof InterruptedException) {
          Thread.currentThread().interrupt();
        }
        IOException io = e instanceof IOException x ? x : new IOException("cleanup failed", e);
        if (first == null) {
          first = io;
        } else {
          first.addSuppressed(io);
        }
      }
    }
    if (first != null) {
      throw first;
    }
  }
}
