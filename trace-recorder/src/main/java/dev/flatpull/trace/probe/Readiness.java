package dev.flatpull.trace.probe;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;

/**
 * Waits until a service is ready: every probe has succeeded at least once (each is retried every {@code interval}
 * until it does). Ready is the instant the last one succeeded. Not ready: {@code timeout} passed, or the container
 * exited (with a non-zero status, or before the probes other than {@code exit} succeeded).
 */
public final class Readiness {
  private Readiness() {}

  /** Returns the time from the call to ready. */
  public static Duration await(List<Probe> probes, ContainerView container, Duration interval, Duration timeout)
      throws NotReadyException, InterruptedException {
    if (probes.isEmpty()) {
      throw new IllegalArgumentException("at least one probe is needed");
    }
    long start = System.nanoTime();
    long deadline = start + timeout.toNanos();
    List<Probe> pending = new ArrayList<>(probes);
    Duration attempt = interval.compareTo(Duration.ofSeconds(1)) < 0 ? Duration.ofSeconds(1) : interval;
    while (true) {
      boolean exited = container.exitStatus().isPresent();
      pending.removeIf(p -> p.check(container, attempt));
      if (pending.isEmpty()) {
        return Duration.ofNanos(System.nanoTime() - start);
      }
      if (exited) {
        int status = container.exitStatus().getAsInt();
        throw new NotReadyException("the container exited with status " + status + " before "
            + describe(pending) + (pending.size() == 1 ? " succeeded" : " all succeeded") + lastOutput(container));
      }
      if (System.nanoTime() >= deadline) {
        throw new NotReadyException("timed out after " + timeout.toMillis() + " ms waiting for " + describe(pending)
            + lastOutput(container));
      }
      Thread.sleep(Math.max(1, Math.min(interval.toMillis(), (deadline - System.nanoTime()) / 1_000_000)));
    }
  }

  /** The lines a failed start ends with, which say why more often than its status: a service logs before it exits. */
  private static final int OUTPUT_SHOWN = 10;

  private static String lastOutput(ContainerView container) {
    List<String> lines = container.outputLines();
    if (lines.isEmpty()) {
      return "; it wrote nothing to stdout or stderr";
    }
    List<String> last = lines.subList(Math.max(0, lines.size() - OUTPUT_SHOWN), lines.size());
    return "; " + (last.size() < lines.size() ? "the last " + last.size() + " of its " + lines.size() + " lines"
        : "its output") + ":" + last.stream().map(l -> "\n  " + l).collect(Collectors.joining());
  }

  private static String describe(List<Probe> pending) {
    return pending.stream().map(p -> "'" + p.spec() + "'").collect(Collectors.joining(", ", "probe ", ""));
  }
}
