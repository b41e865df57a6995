package dev.flatpull.snapshotter.overlay;

import java.util.List;
import java.util.Objects;

/** A mount containerd performs to make a snapshot usable: the arguments of mount(2) without the target. */
public record SnapshotMount(String type, String source, List<String> options) {
  public SnapshotMount {
    Objects.requireNonNull(type);
    Objects.requireNonNull(source);
    options = List.copyOf(options);
  }
}
