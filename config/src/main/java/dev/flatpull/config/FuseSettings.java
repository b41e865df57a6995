package dev.flatpull.config;

import java.util.Locale;
import java.util.Objects;

/**
 * How the FUSE manager serves each layer's mount.
 *
 * @param engine {@link Engine#KERNEL}: flatpull speaks the kernel's FUSE protocol on {@code /dev/fuse} itself (1 MiB
 *     reads, readdirplus, no round trip for opens); {@link Engine#LIBFUSE}: libfuse 2 through jnr-fuse. A node where
 *     the kernel engine cannot mount falls back to libfuse, with one log line.
 * @param passthrough whether the kernel engine opens a file whose every byte is verified on the node with
 *     {@code FOPEN_PASSTHROUGH} on a backing file assembled from its verified chunks, so that the kernel reads it
 *     like a local file; it then answers every open (a round trip each, and a release at the close) instead of none.
 *     Off by default: measured, an answered open costs about 14 µs against 2.6 µs for an open and close left to the
 *     kernel, which a start of many small files pays on every open (docs/benchmarks.md), while passthrough gains only
 *     on large files read whole again (105 against 432 µs a MiB): a node whose services read large files (model
 *     weights) turns it on
 * @param passthroughMinBytes the smallest file given a backing file: a file that fits in one read of the kernel's
 *     readahead window (128 KiB) costs one round trip either way, and its backing file would only copy it
 */
public record FuseSettings(Engine engine, boolean passthrough, long passthroughMinBytes) {
  public static final FuseSettings DEFAULTS = new FuseSettings(Engine.KERNEL, false, 256L << 10);

  public FuseSettings {
    Objects.requireNonNull(engine);
    if (passthroughMinBytes < 1) {
      throw new IllegalArgumentException("passthrough_min_bytes must be at least 1");
    }
  }

  /** The FUSE engines, by their configuration name. */
  public enum Engine {
    KERNEL,
    LIBFUSE;

    /** The name {@code [fuse] engine} takes. */
    public String configName() {
      return name().toLowerCase(Locale.ROOT);
    }

    /** The engine named {@code name}; empty when none is. */
    public static java.util.Optional<Engine> named(String name) {
      for (Engine e : values()) {
        if (e.configName().equals(name)) {
          return java.util.Optional.of(e);
        }
      }
      return java.util.Optional.empty();
    }
  }
}
