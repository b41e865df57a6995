package dev.flatpull.manager;

import dev.flatpull.fetcher.layer.KeptIndexes;
import java.time.Duration;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * When the manager writes a layer's kept index file. Until it is written, a manager that takes the layer's mount over
 * after a crash fetches and parses the TOC again, from a registry that may be away, while every container on the
 * mount waits: so a small file is written as soon as its TOC is verified. A large one takes disk and CPU a start may
 * need: it waits until reads are quiet, or at the latest {@link #deadline} after its TOC was read (a service that never
 * stops fetching would otherwise leave it unwritten), whichever comes first writing it.
 */
final class IndexWrites implements KeptIndexes.Writes {
  /**
   * Files up to this size are written at once: a copy of what is in memory into the kernel's page cache. In the
   * crash matrix, where a container reads without pause, the two takeovers that found no file (8,350 entries, a file
   * of 1.7 MB, not yet written 1-3 s after the mount) served 1.19 and 1.36 s after the daemon noticed the kill,
   * against 0.74-0.93 s for the others. 16 MiB is about 80,000 entries.
   */
  static final long AT_ONCE_BYTES = 16L << 20;

  private final Executor atOnce;
  private final Consumer<Runnable> whenQuiet;
  private final ScheduledExecutorService timer;
  private final Duration deadline;

  /**
   * @param atOnce runs a small file's write
   * @param whenQuiet runs a large file's write once reads are quiet
   * @param timer hands a large file's write to {@code atOnce} after {@code deadline}
   */
  IndexWrites(Executor atOnce, Consumer<Runnable> whenQuiet, ScheduledExecutorService timer, Duration deadline) {
    this.atOnce = atOnce;
    this.whenQuiet = whenQuiet;
    this.timer = timer;
    this.deadline = deadline;
  }

  @Override
  public void schedule(long bytes, Runnable write) {
    if (bytes <= AT_ONCE_BYTES) {
      atOnce.execute(write);
      return;
    }
    whenQuiet.accept(write);
    timer.schedule(() -> atOnce.execute(write), deadline.toMillis(), TimeUnit.MILLISECONDS);
  }
}
