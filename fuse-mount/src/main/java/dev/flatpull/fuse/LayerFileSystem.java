package dev.flatpull.fuse;

/**
 * The read-only file system of one layer, as a mount serves it: its {@link LayerTree} (metadata, never the network),
 * its {@link LayerContentReader} (contents) and the {@link FuseEvents} its operations report to. An engine answers
 * the kernel from it: {@link KernelSession} directly, libfuse through {@link LibfuseFileSystem}, made only when a mount
 * takes libfuse. It used to be jnr-fuse's file system itself, so that every mount, whatever its engine, bound libfuse
 * anew (a generated class with native stubs, some forty callback closures), all freed by jnr-ffi's finalizers once
 * collected: the kernel engine needs none of it.
 */
public final class LayerFileSystem {
  // Set once by bind, before the mount: the kernel calls in only after it.
  private volatile LayerTree tree;
  private volatile LayerContentReader reader;
  private volatile FuseEvents events = FuseEvents.NONE;
  // libfuse's adapter, made on first need (a libfuse mount, or ahead of one).
  private LibfuseFileSystem libfuse;

  public LayerFileSystem(LayerTree tree, LayerContentReader reader, FuseEvents events) {
    bind(tree, reader, events);
  }

  /** A file system to {@link #bind} later (a spare, made before its layer is known). */
  public LayerFileSystem() {}

  /** Gives an unbound file system its layer; once only, and before it is mounted. */
  public LayerFileSystem bind(LayerTree tree, LayerContentReader reader, FuseEvents events) {
    if (this.tree != null) {
      throw new IllegalStateException("this file system already serves a layer");
    }
    this.reader = reader;
    this.events = events;
    this.tree = tree;
    return this;
  }

  LayerTree tree() {
    return tree;
  }

  LayerContentReader reader() {
    return reader;
  }

  FuseEvents events() {
    return events;
  }

  /** Whether {@link #bind} has given it a layer. */
  boolean bound() {
    return tree != null;
  }

  /**
   * libfuse's adapter of this file system, made on the first call: jnr-fuse's constructor (its libfuse binding, the
   * callback closures, reflection over the adapter) took 10-35 ms, most on a process's first mount, so that a node
   * whose mounts take libfuse makes it ahead, before the layer is bound.
   */
  public synchronized LibfuseFileSystem libfuse() {
    if (libfuse == null) {
      libfuse = new LibfuseFileSystem(this);
    }
    return libfuse;
  }

  /** glibc's makedev: 12 bits of major and 20 of minor, interleaved. */
  static long makedev(long major, long minor) {
    return ((major & 0xfffL) << 8) | (minor & 0xffL) | ((minor & ~0xffL) << 12) | ((major & ~0xfffL) << 32);
  }
}
