package dev.flatpull.config;

import java.time.Duration;
import java.util.Objects;
import java.util.Optional;

/**
 * How runtime images are built and trusted (docs/runtime-images.md).
 *
 * @param verify what the content of a runtime image is checked against before it is served
 * @param frameSize the uncompressed bytes a frame of a runtime image holds at most (a larger chunk gets a frame of its
 *     own): small enough that a frame decodes soon after it arrives, large enough to compress well
 * @param level the zstd level runtime images are compressed with (built once, decoded at every cold start)
 * @param load whether the first remote Prepare of an image looks for its runtime image and streams it in
 * @param service the service-version key whose runtime image is loaded when an image has several; empty: the newest
 * @param stall how long a read of content still in flight in a runtime-image stream waits without seeing the stream
 *     advance before it fetches the content itself
 * @param startupWindow how long after a runtime image arrived its layers count as starting: their background fetch
 *     waits that long (so that it never competes with the start), and their mounts' kernel readahead stays narrowed
 *     as it was when the trace was recorded (so that the kernel asks for the pages the runtime image holds, not its
 *     readahead window around them, which would be lazy fetches)
 * @param kernelLanding whether arriving content is also read through the layer's FUSE mount, in first-access order,
 *     so that it lands in the kernel's page cache before the service asks for it
 */
public record RuntimeImageSettings(Verification verify, long frameSize, int level, boolean load,
    Optional<String> service, Duration stall, Duration startupWindow, boolean kernelLanding) {
  public static final RuntimeImageSettings DEFAULTS = new RuntimeImageSettings(Verification.IMAGE, 256L << 10, 9,
      true, Optional.empty(), Duration.ofMillis(500), Duration.ofSeconds(30), false);

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
    Objects.requireNonNull(service);
    Objects.requireNonNull(stall);
    Objects.requireNonNull(startupWindow);
    if (stall.isNegative() || stall.isZero()) {
      throw new IllegalArgumentException("stall must be longer than zero");
    }
    if (frameSize < 4096 || frameSize > (64L << 20)) {
      throw new IllegalArgumentException("frame size must be within 4 KiB..64 MiB, got " + frameSize);
    }
    if (level < 1 || level > 22) {
      throw new IllegalArgumentException("zstd level must be within 1..22, got " + level);
    }
  }

  public RuntimeImageSettings withVerify(Verification v) {
    return new RuntimeImageSettings(v, frameSize, level, load, service, stall, startupWindow, kernelLanding);
  }

  public RuntimeImageSettings withLoad(boolean l) {
    return new RuntimeImageSettings(verify, frameSize, level, l, service, stall, startupWindow, kernelLanding);
  }

  public RuntimeImageSettings withFrameSize(long bytes) {
    return new RuntimeImageSettings(verify, bytes, level, load, service, stall, startupWindow, kernelLanding);
  }
}
