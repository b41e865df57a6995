package dev.flatpull.manager;

import dev.flatpull.fuse.DeviceHandover;
import dev.flatpull.fuse.MountHandover;
import dev.flatpull.manager.api.v1.MountedLayer;
import dev.flatpull.manager.api.v1.StatusResponse;
import dev.flatpull.manager.client.FuseManagerClient;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.logging.Logger;
import java.util.stream.Collectors;

/**
 * A FUSE manager replacing the one that serves now, on purpose (an upgrade, {@code flatpull replace-manager}): it
 * takes every mount over while its predecessor still serves (both answer the kernel meanwhile: the same layers, the
 * same node numbers), then retires the predecessor ({@code Retire}), waits for it to exit and asks the kernel again
 * for what it had read and not answered. A running container sees no pause but that last resend's.
 */
public final class Succession {
  private static final Logger LOG = Logger.getLogger(Succession.class.getName());
  /** How long a retired predecessor may take to exit before it is killed. */
  static final Duration EXIT_PATIENCE = FuseManagerService.RETIRE_PATIENCE.plusSeconds(5);

  private final FuseManagerClient predecessor;
  private final StatusResponse status;

  private Succession(FuseManagerClient predecessor, StatusResponse status) {
    this.predecessor = predecessor;
    this.status = status;
  }

  /** The manager serving on {@code socket} now, to be replaced; empty when none answers. */
  public static Optional<Succession> find(Path socket) {
    FuseManagerClient c = new FuseManagerClient(socket, List.of(), Path.of("/dev/null"));
    try {
      // The connection made here stays the predecessor's after this manager's socket is renamed over its own.
      return Optional.of(new Succession(c, c.status(5)));
    } catch (IOException none) {
      c.close();
      return Optional.empty();
    }
  }

  public long pid() {
    return status.getPid();
  }

  public String version() {
    return status.getVersion();
  }

  /**
   * Serves every mount the predecessor serves, beside it. Refused, with nothing taken, when the daemon holds no
   * device for one of them (a libfuse mount; no daemon running): retiring the predecessor would break that mount.
   *
   * @return the mount points taken over
   */
  public List<Path> takeOver(LayerServer layers) throws IOException {
    List<MountHandover.Taken> held = layers.heldMounts();
    Set<Path> heldPoints = held.stream().map(MountHandover.Taken::mountPoint).collect(Collectors.toSet());
    List<String> missing = status.getLayersList().stream().map(MountedLayer::getMountPoint)
        .filter(p -> !heldPoints.contains(Path.of(p).toAbsolutePath().normalize())).toList();
    if (!missing.isEmpty()) {
      held.forEach(t -> DeviceHandover.closeDescriptor(t.device()));
      throw new IOException("FUSE manager " + pid() + " serves " + missing.size() + " mount(s) whose FUSE device the"
          + " daemon does not hold, which a successor cannot take over (libfuse mounts, or no daemon running), such as "
          + missing.get(0) + "; it keeps serving");
    }
    List<Path> taken = layers.takeOver(held, false);
    if (taken.size() < held.size()) {
      // Served by the predecessor until it exits; then found unserved by the daemon, which asks for them again.
      LOG.warning((held.size() - taken.size()) + " of " + held.size() + " mounts could not be taken over beside FUSE"
          + " manager " + pid() + "; the daemon asks for them once it has exited");
    }
    return taken;
  }

  /**
   * Asks the predecessor to retire in favour of {@code successorPid} (now answering on the socket) and waits for it to
   * exit; killed if it refuses, or does not exit within {@link #EXIT_PATIENCE}: both serve the same mounts, and this
   * one serves them alone from here on.
   *
   * @return how long it took
   */
  public Duration retire(long successorPid) throws InterruptedException {
    long t0 = System.nanoTime();
    try {
      predecessor.retire(pid(), successorPid);
    } catch (IOException e) {
      // An answer lost as it exits is an answer.
      if (FuseManagerClient.running(pid())) {
        LOG.warning("FUSE manager " + pid() + " refused to retire (" + e.getMessage() + "); killing it");
        ProcessHandle.of(pid()).ifPresent(ProcessHandle::destroyForcibly);
      }
    } finally {
      predecessor.close();
    }
    Optional<ProcessHandle> old = ProcessHandle.of(pid());
    long deadline = t0 + EXIT_PATIENCE.toNanos();
    while (old.isPresent() && FuseManagerClient.running(pid())) {
      if (System.nanoTime() > deadline) {
        LOG.warning("FUSE manager " + pid() + " did not exit " + EXIT_PATIENCE.toSeconds() + " s after it was"
            + " retired; killing it");
        old.get().destroyForcibly();
        deadline = Long.MAX_VALUE;
      }
      // Not a child of this process: polled.
      Thread.sleep(10);
    }
    return Duration.ofNanos(System.nanoTime() - t0);
  }
}
