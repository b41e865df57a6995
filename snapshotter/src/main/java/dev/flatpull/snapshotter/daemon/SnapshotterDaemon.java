package dev.flatpull.snapshotter.daemon;

import dev.flatpull.config.ConfigException;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.snapshotter.grpc.SnapshotsServer;
import dev.flatpull.snapshotter.overlay.OverlaySnapshotter;
import dev.flatpull.snapshotter.metrics.DaemonMeters;
import dev.flatpull.endpoints.metrics.Meters;
import dev.flatpull.endpoints.metrics.MetricsServer;
import dev.flatpull.manager.client.FuseManagerClient;
import dev.flatpull.fuse.DeviceHolder;
import dev.flatpull.snapshotter.remote.RegistryRemoteLayers;
import java.io.IOException;
import java.time.InstantSource;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;
import java.util.logging.Logger;

/**
 * {@code flatpull serve}: containerd's Snapshots API on a unix socket, over the overlay snapshotter, with remote
 * layers served by the FUSE manager (started here when none runs). Stopping the daemon leaves the manager and its
 * mounts alone, so containers keep running; the next start adopts them.
 */
public final class SnapshotterDaemon implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(SnapshotterDaemon.class.getName());

  private final RegistryClients clients;
  private final FuseManagerClient manager;
  private final DeviceHolder devices;
  private final OverlaySnapshotter snapshotter;
  private final SnapshotsServer server;
  private final Optional<MetricsServer> metricsEndpoint;
  private final ScheduledExecutorService watchdog = Executors.newSingleThreadScheduledExecutor(
      dev.flatpull.core.DaemonThreads.named("flatpull-watchdog"));
  // The manager whose exit is watched, so that each is watched once.
  private final java.util.concurrent.atomic.AtomicLong watched = new java.util.concurrent.atomic.AtomicLong(-1);

  private SnapshotterDaemon(RegistryClients clients, FuseManagerClient manager, DeviceHolder devices,
      OverlaySnapshotter snapshotter, SnapshotsServer server, Optional<MetricsServer> metricsEndpoint) {
    this.clients = clients;
    this.manager = manager;
    this.devices = devices;
    this.snapshotter = snapshotter;
    this.server = server;
    this.metricsEndpoint = metricsEndpoint;
  }

  /**
   * Starts the daemon.
   *
   * @param managerCommand runs a FUSE manager for the same configuration, when none answers yet (asked at each start)
   */
  public static SnapshotterDaemon start(FlatpullConfig config, Platform platform,
      java.util.function.Supplier<List<String>> managerCommand)
      throws IOException, ConfigException {
    Meters meters = new Meters();
    DaemonMeters metrics = new DaemonMeters(meters);
    dev.flatpull.fetcher.registry.FetchStatistics fetched = new dev.flatpull.fetcher.registry.FetchStatistics();
    metrics.bindRegistry(fetched);
    RegistryClients clients = RegistryClients.create(config, fetched);
    FuseManagerClient manager = new FuseManagerClient(config.snapshotter().fuseManagerSocket(), managerCommand,
        config.root().resolve("fuse-manager.log"));
    // The process's clocks, bound here once: the classes below take them as arguments.
    LongSupplier nanoTime = System::nanoTime;
    InstantSource clock = InstantSource.system();
    OverlaySnapshotter snapshotter = null;
    DeviceHolder devices = null;
    java.util.concurrent.atomic.AtomicReference<SnapshotterDaemon> started =
        new java.util.concurrent.atomic.AtomicReference<>();
    try {
      // Before the snapshotter opens: a manager that runs hands its mounts' devices over within a second.
      devices = DeviceHolder.listen(config.snapshotter().fuseDevicesSocket(), () -> {
        SnapshotterDaemon d = started.get();
        if (d != null) {
          d.managerConnectionEnded();
        }
      });
      snapshotter = OverlaySnapshotter.open(config.root(),
          new RegistryRemoteLayers(clients, platform, manager, nanoTime, devices), metrics,
          OverlaySnapshotter.Environment.of(nanoTime, clock));
      SnapshotsServer server = SnapshotsServer.start(config.snapshotter().socket(), snapshotter, metrics::call);
      Optional<MetricsServer> endpoint = Optional.empty();
      if (config.snapshotter().metricsAddress().isPresent()) {
        endpoint = Optional.of(MetricsServer.start(config.snapshotter().metricsAddress().get(), meters));
      }
      SnapshotterDaemon d = new SnapshotterDaemon(clients, manager, devices, snapshotter, server, endpoint);
      started.set(d);
      // At once, so that the FUSE manager starts (and warms up) before the first remote Prepare, yet serving never
      // waits for it: open() has already remounted whatever containers use.
      d.watchdog.scheduleWithFixedDelay(d::keepLayersServed, 0, 10, TimeUnit.SECONDS);
      LOG.info("serving containerd's Snapshots API on " + config.snapshotter().socket());
      return d;
    } catch (IOException | RuntimeException e) {
      if (snapshotter != null) {
        snapshotter.close();
      }
      if (devices != null) {
        devices.close();
      }
      manager.close();
      clients.close();
      throw e;
    }
  }

  /**
   * Keeps a FUSE manager running, so that a remote Prepare finds one warmed up, and after a crash of the manager
   * mounts the remote snapshots' layers again in the one it starts.
   */
  private void keepLayersServed() {
    // This run checks what a pending recheck would have: at most one is ever pending.
    if (recheck != null) {
      recheck.cancel(false);
      recheck = null;
    }
    try {
      watchExit(manager.ensureRunning().getPid());
      snapshotter.remountRemote();
      // Devices of mounts detached since (a removal's clean-up) keep nothing alive but a descriptor.
      devices.dropUnless(p -> {
        try {
          return dev.flatpull.core.MountTable.isMountPoint(p);
        } catch (IOException e) {
          return true; // asked again next round
        }
      });
      failedChecks = 0;
    } catch (IOException | RuntimeException e) {
      // A manager that died while it started (killed again, say) is found here, not at its exit, which is watched only
      // once it answers: checked again soon, not at the watchdog's next round, backing off while it keeps failing.
      long delay = Math.min(RECHECK_MAX_MILLIS, RECHECK_FIRST_MILLIS << Math.min(failedChecks++, 5));
      LOG.warning("checking the FUSE manager failed: " + e.getMessage() + "; checking again in " + delay + " ms");
      try {
        recheck = watchdog.schedule(this::keepLayersServed, delay, TimeUnit.MILLISECONDS);
      } catch (java.util.concurrent.RejectedExecutionException closing) {
        // the daemon is stopping
      }
    }
  }

  private static final long RECHECK_FIRST_MILLIS = 500;
  private static final long RECHECK_MAX_MILLIS = 10_000;
  // Checks failed in a row, and the recheck pending: the watchdog's thread alone reads and writes them.
  private int failedChecks;
  private java.util.concurrent.ScheduledFuture<?> recheck;

  /**
   * Replaces a manager as soon as it exits, not at the next round of the watchdog: until a new one serves, every
   * remote Prepare is pulled whole and containerd's removals of remote snapshots wait (a node crash matrix round spent
   * 10-20 s so). A manager this daemon did not start is watched too (the JDK polls a process that is not its child,
   * which is why the end of its connection to the device holder is watched as well: {@link #managerConnectionEnded}).
   */
  private void watchExit(long pid) {
    if (pid <= 0 || watched.getAndSet(pid) == pid) {
      return;
    }
    ProcessHandle.of(pid).ifPresent(h -> h.onExit().thenRun(() -> {
      LOG.warning("the FUSE manager " + pid + " exited; starting another");
      checkNow();
    }));
  }

  /**
   * A manager's connection to the device holder ended: it exited, or it was killed. Checked at once (when it still
   * runs, the check finds it serving): a manager this daemon did not start (one started by the daemon before a
   * restart, or by {@code flatpull replace-manager}) is not its child, and its exit is only polled for, at intervals
   * that grow to 5 s, while the running containers' reads wait for the next manager.
   */
  private void managerConnectionEnded() {
    LOG.info("a FUSE manager's connection to the device holder ended; checking the manager");
    checkNow();
  }

  /** Runs {@link #keepLayersServed} on the watchdog's thread now, not at its next round. */
  private void checkNow() {
    try {
      watchdog.execute(this::keepLayersServed);
    } catch (java.util.concurrent.RejectedExecutionException closing) {
      // the daemon is stopping
    }
  }

  public int metricsPort() {
    return metricsEndpoint.map(MetricsServer::port).orElse(-1);
  }

  /** Blocks until the gRPC server stops. */
  public void awaitTermination() throws InterruptedException {
    server.awaitTermination();
  }

  @Override
  public void close() throws IOException {
    watchdog.shutdownNow();
    metricsEndpoint.ifPresent(MetricsServer::close);
    server.close();
    try {
      snapshotter.close();
    } finally {
      devices.close();
      manager.close();
      clients.close();
    }
  }
}
