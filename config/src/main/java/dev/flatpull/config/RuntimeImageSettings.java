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
 * @param limits how much a runtime image may ask of a node, relative to the image it belongs to
 * @param borrow whether an image without a runtime image of its own borrows one of another version in its repository
 *     (docs/runtime-images.md, "Borrowing at a node")
 * @param borrowMinOverlap the least share of a runtime image's bytes an image must have for it to be borrowed
 */
public record RuntimeImageSettings(Verification verify, long frameSize, int level, boolean load,
    Optional<String> service, Duration stall, Duration startupWindow, Limits limits, boolean borrow,
    double borrowMinOverlap) {
  public static final RuntimeImageSettings DEFAULTS = new RuntimeImageSettings(Verification.IMAGE, 256L << 10, 9,
      true, Optional.empty(), Duration.ofMillis(500), Duration.ofSeconds(30), Limits.DEFAULTS, true, 0.5);

  /**
   * What a node accepts of a runtime image, bounded by the image it belongs to (docs/runtime-images.md, "Limits"):
   * anyone who can push to a repository can publish one, and every node starting the image reads it.
   *
   * @param maxShare the largest share of the image's file content a runtime image may bring: a start-up working set,
   *     not the image (a runtime image promising more is not streamed; the lazy loader serves the start)
   * @param indexBytesPerExtent the index's decompressed bytes allowed per extent the image's TOCs make possible (an
   *     extent is a chunk of a TOC, or a page in page mode; one written by flatpull takes about 130)
   * @param frameSlack bytes a frame may hold beyond the extents it carries, and its compressed length beyond zstd's
   *     bound for its content
   */
  public record Limits(double maxShare, int indexBytesPerExtent, long frameSlack) {
    public static final Limits DEFAULTS = new Limits(0.75, 256, 4096);

    public Limits {
      if (!(maxShare > 0) || maxShare > 1) {
        throw new IllegalArgumentException("max share must be greater than 0 and at most 1, got " + maxShare);
      }
      if (indexBytesPerExtent < 64 || indexBytesPerExtent > 65536) {
        throw new IllegalArgumentException("index bytes per extent must be within 64..65536, got "
            + indexBytesPerExtent);
      }
      if (frameSlack < 0 || frameSlack > (1L << 20)) {
        throw new IllegalArgumentException("frame slack must be within 0..1 MiB, got " + frameSlack);
      }
    }
  }

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
    Objects.requireNonNull(limits);
    if (stall.isNegative() || stall.isZero()) {
      throw new IllegalArgumentException("stall must be longer than zero");
    }
    if (frameSize < 4096 || frameSize > (64L << 20)) {
      throw new IllegalArgumentException("frame size must be within 4 KiB..64 MiB, got " + frameSize);
    }
    if (level < 1 || level > 22) {
      throw new IllegalArgumentException("zstd level must be within 1..22, got " + level);
    }
    if (!(borrowMinOverlap > 0) || borrowMinOverlap > 1) {
      throw new IllegalArgumentException("borrow_min_overlap must be greater than 0 and at most 1, got "
          + borrowMinOverlap);
    }
  }

  public RuntimeImageSettings withVerify(Verification v) {
    return new RuntimeImageSettings(v, frameSize, level, load, service, stall, startupWindow, limits, borrow,
        borrowMinOverlap);
  }

  public RuntimeImageSettings withLoad(boolean l) {
    return new RuntimeImageSettings(verify, frameSize, level, l, service, stall, startupWindow, limits, borrow,
        borrowMinOverlap);
  }

  public RuntimeImageSettings withLimits(Limits l) {
    return new RuntimeImageSettings(verify, frameSize, level, load, service, stall, startupWindow, l, borrow,
        borrowMinOverlap);
  }

  public RuntimeImageSettings withService(Optional<String> s) {
    return new RuntimeImageSettings(verify, frameSize, level, load, s, stall, startupWindow, limits, borrow,
        borrowMinOverlap);
  }

  public RuntimeImageSettings withBorrow(boolean b) {
    return new RuntimeImageSettings(verify, frameSize, level, load, service, stall, startupWindow, limits, b,
        borrowMinOverlap);
  }

  public RuntimeImageSettings withFrameSize(long bytes) {
    return new RuntimeImageSettings(verify, bytes, level, load, service, stall, startupWindow, limits, borrow,
        borrowMinOverlap);
  }
}
