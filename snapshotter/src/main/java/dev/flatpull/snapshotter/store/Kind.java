package dev.flatpull.snapshotter.store;

/** The three kinds of containerd snapshot. */
public enum Kind {
  /** Read-only, made by View; never committed. */
  VIEW,
  /** Writable, made by Prepare; committing it makes a committed snapshot. */
  ACTIVE,
  /** Immutable; the only kind that may be a parent. */
  COMMITTED
}
