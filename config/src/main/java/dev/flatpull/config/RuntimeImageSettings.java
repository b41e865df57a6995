package dev.flatpull.config;

import java.util.Objects;

/**
 * How runtime images are built and trusted (docs/runtime-images.md).
 *
 * @param verify what the content of a runtime image is checked against before it is served
 * @param frameSize the uncompressed bytes a frame of a runtime image holds at most (a larger chunk gets a frame of its
 *     own): small enough that a frame decodes soon after it arrives, large enough to compress well
 * @param level the zstd level runtime images are compressed with (built once, decoded at every cold start)
 */
public record RuntimeImageSettings(Verification verify, long frameSize, int level) {
  public static final RuntimeImageSettings DEFAULTS = new RuntimeImageSettings(Verification.IMAGE, 256L << 10, 9);

  /** What a runtime image's content is verified against. */
  public enum Verification {
    /**
     * Whole chunks of the layers, each checked against the chunk digest of the layer's TOC, whose digest the image
     * manifest pins: a runtime image can only bring bytes the image has. The default.
     */
    IMAGE("image"),
    /**
     * Single pages checked against digests in the runtime image's own index, which is bound to the image only by the
     * artifact's {@code subject}: whoever can push a referrer to the repository decides what containers read.
     */
    RUNTIME_IMAGE("runtime-image");

    private final String key;

    Verification(String key) {
      this.key = key;
    }

    /** The name used in configuration, on the command line and in runtime-image indexes. */
    public String key() {
      return key;
    }

    /** The mode named {@code key}. */
    public static Verification of(String key) {
      for (Verification v : values()) {
        if (v.key.equals(key)) {
          return v;
        }
      }
      throw new IllegalArgumentException("unknown verification '" + key + "' (image, runtime-image)");
    }
  }

  public RuntimeImageSettings {
    Objects.requireNonNull(verify);
    if (frameSize < 4096 || frameSize > (64L << 20)) {
      throw new IllegalArgumentException("frame size must be within 4 KiB..64 MiB, got " + frameSize);
    }
    if (level < 1 || level > 22) {
      throw new IllegalArgumentException("zstd level must be within 1..22, got " + level);
    }
  }

  public RuntimeImageSettings withVerify(Verification v) {
    return new RuntimeImageSettings(v, frameSize, level);
  }

  public RuntimeImageSettings withFrameSize(long bytes) {
    return new RuntimeImageSettings(verify, bytes, level);
  }
}
