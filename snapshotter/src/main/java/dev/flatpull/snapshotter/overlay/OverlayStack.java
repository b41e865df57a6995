package dev.flatpull.snapshotter.overlay;

import java.util.List;

/**
 * How flatpull stacks layers with overlayfs, for containerd's mounts and {@code flatpull mount} alike: the options a
 * stack of lower directories takes.
 */
public final class OverlayStack {
  private OverlayStack() {}

  /**
   * The overlay options for lower directories {@code lowerTopFirst} (the uppermost layer first, as {@code lowerdir}
   * lists them); an active snapshot adds its {@code upperdir} and {@code workdir}, a view {@code ro}.
   */
  public static List<String> lowerOptions(List<String> lowerTopFirst) {
    if (lowerTopFirst.isEmpty()) {
      throw new IllegalArgumentException("an overlay needs at least one lower directory");
    }
    // Without an index overlayfs need not encode lower file handles, which FUSE layers do not guarantee.
    return List.of("index=off", "lowerdir=" + String.join(":", lowerTopFirst));
  }
}
