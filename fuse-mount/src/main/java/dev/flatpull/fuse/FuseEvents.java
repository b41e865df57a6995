package dev.flatpull.fuse;

/**
 * Observes a layer file system. Called on FUSE threads: implementations must be fast, thread-safe, and not throw.
 */
public interface FuseEvents {
  FuseEvents NONE = new FuseEvents() {};

  /** A FUSE operation failed and answered {@code errno} (negated) to the kernel; {@code cause} says why. */
  default void operationFailed(String operation, String path, int errno, Throwable cause) {}

  /** A read was served: {@code bytes} returned for {@code path}. */
  default void readServed(String path, long offset, int bytes) {}
}
