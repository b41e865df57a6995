package dev.flatpull.manager;

import dev.flatpull.fuse.ReadActivity;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;
import java.util.logging.Logger;

/**
 * Objects that cost CPU to build, built ahead of the mounts that take them, and only while on-demand reads leave the
 * node alone: the manager's FUSE file systems. One was built right after each mount, to be ready for the next; that
 * put its CPU (jnr-fuse's libfuse binding, generated anew for every file system, and the JIT compiling that binding's
 * generator at the first real mounts: 200 ms of a compiler thread on the 2-core benchmark machine) exactly where
 * containerd was creating the container and the service starting to read.
 *
 * <p>{@link #take} never waits for the builder: with none ready it builds one itself.
 */
final class Spares<T> {
  private static final Logger LOG = Logger.getLogger(Spares.class.getName());

  private final int target;
  private final Supplier<T> build;
  private final ReadActivity activity;
  private final Executor builder;
  private final ConcurrentLinkedDeque<T> ready = new ConcurrentLinkedDeque<>();
  private final AtomicBoolean filling = new AtomicBoolean();

  /**
   * Starts filling at once; the builder waits only while reads are busy or not yet quiet.
   *
   * @param target how many are kept ready: the layers of an image's cold start that find one
   * @param activity building waits while it says reads are busy, and for its quiet period after them
   * @param builder where building runs; a task of it may wait for reads to be quiet
   */
  Spares(int target, Supplier<T> build, ReadActivity activity, Executor builder) {
    if (target < 1) {
      throw new IllegalArgumentException("target must be positive: " + target);
    }
    this.target = target;
    this.build = build;
    this.activity = activity;
    this.builder = builder;
    fill();
  }

  /** A spare if one is ready, else one built now; either way building resumes once reads are quiet. */
  T take() {
    T spare = ready.poll();
    fill();
    return spare != null ? spare : build.get();
  }

  /** How many are ready now. */
  int ready() {
    return ready.size();
  }

  private void fill() {
    if (ready.size() >= target || !filling.compareAndSet(false, true)) {
      return;
    }
    try {
      builder.execute(this::build);
    } catch (RejectedExecutionException closed) {
      filling.set(false);
    }
  }

  private void build() {
    boolean failed = false;
    try {
      while (ready.size() < target) {
        activity.awaitIdle();
        ready.add(build.get());
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      failed = true;
    } catch (RuntimeException | LinkageError e) {
      // A mount that finds none builds its own, and fails there with the reason.
      LOG.warning("building a spare failed: " + e);
      failed = true;
    } finally {
      filling.set(false);
    }
    if (!failed) {
      // A take between the loop's last check and the flag's reset found building still under way.
      fill();
    }
  }
}
