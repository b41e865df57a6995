package dev.flatpull.config;

import java.util.Locale;
import java.util.Objects;

/**
 * How the FUSE manager serves each layer's mount.
 *
 * @param engine {@link Engine#KERNEL}: flatpull speaks the kernel's FUSE protocol on {@code /dev/fuse} itself (1 MiB
 *     reads, readdirplus, no round trip for opens); {@link Engine#LIBFUSE}: libfuse 2 through jnr-fuse. A node where
 *     the kernel engine cannot mount falls back to libfuse, with one log line.
 */
public record FuseSettings(Engine engine) {
  public static final FuseSettings DEFAULTS = new FuseSettings(Engine.KERNEL);

  public FuseSettings {
    Objects.requireNonNull(engine);
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
