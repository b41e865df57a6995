package dev.flatpull.snapshotter.record;

import dev.flatpull.trace.probe.ContainerView;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.OptionalInt;

/** A container run in the foreground by {@code ctr run}: its output lines and exit status, for the probes. */
final class ContainerRun implements ContainerView {
  private final Process process;
  private final List<String> lines = Collections.synchronizedList(new ArrayList<>());
  private final List<Thread> pumps = new ArrayList<>();

  ContainerRun(List<String> command) throws IOException {
    process = new ProcessBuilder(command).redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")))
        .start();
    pumps.add(pump(process.getInputStream()));
    pumps.add(pump(process.getErrorStream()));
  }

  private Thread pump(InputStream in) {
    Thread t = dev.flatpull.core.DaemonThreads.named("flatpull-record-output").newThread(() -> {
      try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
        for (String line; (line = r.readLine()) != null; ) {
          lines.add(line);
        }
      } catch (IOException closed) {
        // The process is gone.
      }
    });
    t.start();
    return t;
  }

  @Override
  public OptionalInt exitStatus() {
    if (process.isAlive()) {
      return OptionalInt.empty();
    }
    // The output of a command that has exited is complete once the pumps are done with it.
    for (Thread t : pumps) {
      try {
        t.join(2000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    return OptionalInt.of(process.exitValue());
  }

  @Override
  public List<String> outputLines() {
    synchronized (lines) {
      return List.copyOf(lines);
    }
  }

  /** Waits for {@code ctr run} to return (after the task was killed). */
  void awaitExit() throws InterruptedException {
    if (!process.waitFor(30, java.util.concurrent.TimeUnit.SECONDS)) {
      process.destroyForcibly();
    }
  }
}
