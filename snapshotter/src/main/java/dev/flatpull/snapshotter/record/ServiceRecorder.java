package dev.flatpull.snapshotter.record;

import dev.flatpull.core.Progress;
import dev.flatpull.manager.client.FuseManagerClient;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.TraceMerger;
import dev.flatpull.trace.probe.NotReadyException;
import dev.flatpull.trace.probe.Probe;
import dev.flatpull.trace.probe.Readiness;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

/**
 * Cold-starts a service through containerd with flatpull's FUSE manager recording, until its probes pass, as many
 * times as asked, and merges what each start read. containerd is driven with {@code ctr-remote} (package
 * {@code stargz-snapshotter}), which pulls remotely and runs containers.
 */
public final class ServiceRecorder {
  /**
   * How to start the service.
   *
   * @param image the image reference
   * @param layers the digests of the image's layers: only their reads belong to the trace
   * @param command the command and arguments; empty for the image's default
   */
  public record Plan(String image, Set<String> layers, List<Probe> probes, Duration interval, Duration timeout,
      int runs, Path containerdSocket, String namespace, String snapshotter, boolean plainHttp, boolean hostNetwork,
      List<String> environment, String workingDirectory, List<String> command) {}

  /** The merged pages and each run's time to ready. */
  public record Result(List<LayerTrace> layers, List<Long> readyMillis) {}

  private final FuseManagerClient manager;
  /** How often the state of a wait is asked of the manager. */
  private static final long STATUS_EVERY_MILLIS = 200;

  private final Progress progress;

  public ServiceRecorder(FuseManagerClient manager, Progress progress) {
    this.manager = manager;
    this.progress = progress;
  }

  public Result record(Plan plan) throws IOException, InterruptedException, NotReadyException {
    List<Map<String, LayerTrace>> recordings = new ArrayList<>();
    List<Long> ready = new ArrayList<>();
    for (int run = 1; run <= plan.runs(); run++) {
      progress.step(String.format("run %d/%d: pulling %s remotely", run, plan.runs(), plan.image()));
      List<String> pull = new ArrayList<>(ctr(plan, "image", "rpull", "--snapshotter", plan.snapshotter()));
      if (plan.plainHttp()) {
        pull.add("--plain-http");
      }
      pull.add(plan.image());
      RecordingStatus status = status();
      try (Watch w = watch(status, String.format("run %d/%d: pulling", run, plan.runs()), Optional.empty())) {
        run(pull);
      }
      // Recording first, then the kernel's caches dropped: a runtime image the pull found (the image's own, or one it
      // borrowed) pushes no page into the kernel while reads are recorded, and what it pushed before is gone, so that
      // every page the service reads reaches the recorder.
      List<String> notes = manager.startRecording();
      dropCaches();
      if (run == 1) {
        notes.forEach(n -> progress.step("note: " + n));
      }
      String id = "flatpull-record-" + ProcessHandle.current().pid() + "-" + run;
      List<String> start = new ArrayList<>(ctr(plan, "run", "--rm", "--snapshotter", plan.snapshotter()));
      if (plan.hostNetwork()) {
        start.add("--net-host");
      }
      plan.environment().forEach(e -> start.addAll(List.of("--env", e)));
      if (!plan.workingDirectory().isEmpty()) {
        start.addAll(List.of("--cwd", plan.workingDirectory()));
      }
      start.add(plan.image());
      start.add(id);
      start.addAll(plan.command());
      progress.step(String.format("run %d/%d: starting the container, waiting for %d probe%s", run, plan.runs(),
          plan.probes().size(), plan.probes().size() == 1 ? "" : "s"));
      ContainerRun container = new ContainerRun(start);
      Duration toReady;
      long deadline = System.nanoTime() + plan.timeout().toNanos();
      try (Watch w = watch(status, String.format("run %d/%d: waiting for %d probe%s", run, plan.runs(),
          plan.probes().size(), plan.probes().size() == 1 ? "" : "s"), Optional.of(deadline))) {
        toReady = Readiness.await(plan.probes(), container, plan.interval(), plan.timeout());
      } catch (NotReadyException | InterruptedException e) {
        stopQuietly();
        stop(plan, id, container);
        throw e;
      }
      Map<String, LayerTrace> pages = new TreeMap<>();
      for (LayerTrace t : manager.stopRecording()) {
        if (plan.layers().contains(t.layerDigest())) {
          pages.put(t.layerDigest(), t);
        }
      }
      stop(plan, id, container);
      long total = pages.values().stream().mapToLong(LayerTrace::pages).sum();
      progress.step(String.format(java.util.Locale.ROOT, "run %d/%d: ready after %.2f s; %d pages (%.1f MiB) read",
          run, plan.runs(), toReady.toNanos() / 1e9, total, total * LayerTrace.PAGE_SIZE / 1048576.0));
      recordings.add(pages);
      ready.add(toReady.toMillis());
    }
    return new Result(TraceMerger.merge(recordings), ready);
  }

  /** What the manager had fetched when a run starts; a run without an answering manager counts from nothing. */
  private RecordingStatus status() {
    try {
      var s = manager.status(2);
      return new RecordingStatus(System.nanoTime(), s.getRegistryBytes(), s.getRegistryRequests());
    } catch (IOException e) {
      return new RecordingStatus(System.nanoTime(), 0, 0);
    }
  }

  /** Shows the state of a wait until closed; closing does not throw. */
  private interface Watch extends AutoCloseable {
    @Override
    void close();
  }

  /**
   * Asks the manager what it fetched every {@link #STATUS_EVERY_MILLIS} while {@code phase} waits, and shows it (the
   * display decides how often); {@code deadline} is when the wait gives up, if it does.
   */
  private Watch watch(RecordingStatus status, String phase, Optional<Long> deadline) {
    Thread t = new Thread(() -> {
      try {
        while (!Thread.currentThread().isInterrupted()) {
          var s = manager.status(2);
          long now = System.nanoTime();
          progress.status(status.line(phase, now, s.getRegistryBytes(), s.getRegistryRequests(),
              deadline.map(d -> Duration.ofNanos(d - now))));
          Thread.sleep(STATUS_EVERY_MILLIS);
        }
      } catch (InterruptedException | IOException | RuntimeException e) {
        // The state of a wait is shown as long as it can be; the wait itself goes on.
      }
    }, "flatpull-record-status");
    t.setDaemon(true);
    t.start();
    return () -> {
      t.interrupt();
      try {
        t.join(1000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    };
  }

  private void stopQuietly() {
    try {
      manager.stopRecording();
    } catch (IOException ignored) {
      // Nothing recorded is kept anyway.
    }
  }

  private void stop(Plan plan, String id, ContainerRun container) throws IOException, InterruptedException {
    if (container.exitStatus().isEmpty()) {
      runQuietly(ctr(plan, "task", "kill", "-s", "SIGKILL", id));
    }
    container.awaitExit();
    runQuietly(ctr(plan, "container", "delete", id));
  }

  /** Empties the kernel's page cache, so that every read of the start reaches the FUSE file systems. */
  private void dropCaches() throws IOException, InterruptedException {
    run(List.of("sync"));
    try {
      Files.writeString(Path.of("/proc/sys/vm/drop_caches"), "3");
    } catch (IOException e) {
      progress.step("note: cannot drop the kernel's caches (" + e.getMessage() + "); pages cached from earlier"
          + " reads will be missing from the trace");
    }
  }

  private static List<String> ctr(Plan plan, String... args) {
    List<String> cmd = new ArrayList<>(List.of("ctr-remote", "-a", plan.containerdSocket().toString(), "--namespace",
        plan.namespace()));
    cmd.addAll(List.of(args));
    return cmd;
  }

  private static void run(List<String> cmd) throws IOException, InterruptedException {
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes());
    if (!p.waitFor(600, TimeUnit.SECONDS) || p.exitValue() != 0) {
      throw new IOException(String.join(" ", cmd) + " failed: " + out.trim());
    }
  }

  private static void runQuietly(List<String> cmd) throws InterruptedException {
    try {
      Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD)
          .start();
      p.waitFor(60, TimeUnit.SECONDS);
    } catch (IOException ignored) {
      // Best effort: the container is gone already.
    }
  }
}
