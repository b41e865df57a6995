package dev.flatpull.snapshotter.cli;

import dev.flatpull.core.Progress;
import java.io.PrintStream;
import java.util.Locale;
import java.util.function.LongSupplier;

/**
 * Shows a long command's progress on standard error: each step as a line, and the step in progress as bytes done of
 * the total, the rate and the time left, or a wait's state. On a terminal the step in progress is one line rewritten in place (at most
 * ten times a second); piped, output stays line-oriented: a line every {@link #PIPED_EVERY_NANOS} while a step runs
 * that long, so that a log shows the command moving without a line per read.
 */
final class ProgressDisplay implements Progress {
  static final long TERMINAL_EVERY_NANOS = 100_000_000L;
  static final long PIPED_EVERY_NANOS = 5_000_000_000L;
  // Back to the line's start and erase it (ANSI), to rewrite the status line.
  private static final String REWRITE = "\r\033[K";

  private final PrintStream out;
  private final boolean terminal;
  private final LongSupplier nanoTime;
  private String current;
  private long phaseStart;
  private long lastShown;
  private boolean statusShown;
  // Whether status() shows a wait (a step without a total), rather than bytes() a step's bytes.
  private boolean waiting;

  /**
   * @param terminal whether {@code out} is a terminal (then the status line is rewritten in place)
   * @param nanoTime the clock (tests pass their own)
   */
  ProgressDisplay(PrintStream out, boolean terminal, LongSupplier nanoTime) {
    this.out = out;
    this.terminal = terminal;
    this.nanoTime = nanoTime;
  }

  /** Standard error, rewritten in place when the command runs on a terminal. */
  static ProgressDisplay onStandardError() {
    return new ProgressDisplay(System.err, System.console() != null, System::nanoTime);
  }

  @Override
  public synchronized void step(String line) {
    // A wait ends with the step after it; the next wait is new.
    waiting = false;
    clearStatus();
    out.println(line);
    out.flush();
  }

  @Override
  public synchronized void bytes(String what, long done, long total) {
    long now = nanoTime.getAsLong();
    if (!what.equals(current)) {
      waiting = false;
      current = what;
      phaseStart = now;
      lastShown = now;
      return;
    }
    if (now - lastShown < every() && done < total) {
      return;
    }
    if (done >= total && !terminal) {
      // The step's next line says it is done; piped, a line at 100 % would only repeat it.
      return;
    }
    show(status(what, done, total, now - phaseStart), now);
  }

  /**
   * A wait's state: on a terminal shown at once and then at most ten times a second; piped, a line every
   * {@link #PIPED_EVERY_NANOS} of the wait (none for a short one).
   */
  @Override
  public synchronized void status(String line) {
    long now = nanoTime.getAsLong();
    if (!waiting) {
      waiting = true;
      current = null;
      lastShown = now;
      if (terminal) {
        show(line, now);
      }
      return;
    }
    if (now - lastShown >= every()) {
      show(line, now);
    }
  }

  private long every() {
    return terminal ? TERMINAL_EVERY_NANOS : PIPED_EVERY_NANOS;
  }

  private void show(String status, long now) {
    lastShown = now;
    if (terminal) {
      out.print(REWRITE + status);
      statusShown = true;
    } else {
      out.println(status);
    }
    out.flush();
  }

  /** Erases the status line, if one is shown: before a step's line, and when the command ends. */
  synchronized void clearStatus() {
    if (statusShown) {
      out.print(REWRITE);
      statusShown = false;
    }
  }

  /** "layer 1/2 ab12: converting 45.2/211.0 MiB (21 %), 38.1 MiB/s, 4 s left". */
  static String status(String what, long done, long total, long elapsedNanos) {
    StringBuilder b = new StringBuilder(what).append(String.format(Locale.ROOT, " %.1f/%.1f MiB", done / 1048576.0,
        total / 1048576.0));
    if (total > 0) {
      b.append(String.format(Locale.ROOT, " (%d %%)", Math.min(100, done * 100 / total)));
    }
    if (elapsedNanos > 0 && done > 0) {
      double perSecond = done * 1e9 / elapsedNanos;
      b.append(String.format(Locale.ROOT, ", %.1f MiB/s", perSecond / 1048576.0));
      if (total > done) {
        b.append(", ").append(duration((long) ((total - done) / perSecond))).append(" left");
      }
    }
    return b.toString();
  }

  private static String duration(long seconds) {
    return seconds < 60 ? seconds + " s" : String.format(Locale.ROOT, "%d min %02d s", seconds / 60, seconds % 60);
  }
}
