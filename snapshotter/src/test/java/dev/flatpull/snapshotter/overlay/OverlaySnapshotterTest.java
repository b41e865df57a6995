package dev.flatpull.snapshotter.overlay;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.snapshotter.store.Kind;
import dev.flatpull.snapshotter.store.RemoteSource;
import dev.flatpull.snapshotter.store.SnapshotException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.InstantSource;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The snapshotter's state machine without mounting anything: remote layers are directories made by a fake. */
class OverlaySnapshotterTest {
  @TempDir Path root;

  /** Remote layers that "mount" by creating a marker file, or fail, as told. */
  static final class FakeRemote implements RemoteLayers {
    RemoteDecision decision = RemoteDecision.serve(new RemoteSource("r.example/app@sha256:" + "a".repeat(64), "{}"));
    boolean failMount;
    final Set<Path> served = new HashSet<>();

    @Override
    public RemoteDecision decide(Map<String, String> labels) {
      return labels.containsKey("remote") ? decision : RemoteDecision.notRequested();
    }

    @Override
    public void mount(RemoteSource source, Path mountPoint) throws IOException {
      if (failMount) {
        throw new IOException("registry went away");
      }
      Files.writeString(mountPoint.resolve("served"), source.imageRef());
      served.add(mountPoint.toAbsolutePath().normalize());
    }

    @Override
    public void unmount(Path mountPoint) {
      served.remove(mountPoint.toAbsolutePath().normalize());
    }

    @Override
    public Set<Path> served() {
      return Set.copyOf(served);
    }
  }

  private OverlaySnapshotter open(RemoteLayers remote, SnapshotterMetrics metrics) throws IOException {
    return OverlaySnapshotter.open(root, remote, metrics,
        OverlaySnapshotter.Environment.system());
  }

  /**
   * containerd's Info carries created and updated times: they come from the clock the snapshotter was given, and a
   * committed snapshot is created by its commit (SnapshotInfoTest has the other rules).
   */
  @Test
  void snapshotTimes_comeFromTheInjectedClock() throws Exception {
    AtomicReference<Instant> now = new AtomicReference<>(Instant.parse("2020-02-03T04:05:06.007Z"));
    InstantSource clock = now::get;
    try (OverlaySnapshotter s = OverlaySnapshotter.open(root, RemoteLayers.NONE,
        new SnapshotterCounters(), OverlaySnapshotter.Environment.of(System::nanoTime, clock))) {
      s.prepare("a", "", Map.of());
      assertEquals(now.get(), s.stat("a").created());
      Instant prepared = now.get();
      now.set(prepared.plusSeconds(90));
      s.commit("c", "a", Map.of());
      assertEquals(now.get(), s.stat("c").created());
      assertEquals(now.get(), s.stat("c").updated());
    }
  }

  @Test
  void theState_isTheOwnersOnly_evenOnARootAnOlderVersionLeftOpen() throws Exception {
    java.util.function.Function<Path, String> mode = p -> {
      try {
        return java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(p));
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    };
    Files.setPosixFilePermissions(root, java.nio.file.attribute.PosixFilePermissions.fromString("rwxr-xr-x"));
    Files.createDirectories(root.resolve("snapshots"));
    Files.setPosixFilePermissions(root.resolve("snapshots"),
        java.nio.file.attribute.PosixFilePermissions.fromString("rwxr-xr-x"));
    try (OverlaySnapshotter s = open(RemoteLayers.NONE, new SnapshotterCounters())) {
      assertEquals("rwx------", mode.apply(root));
      assertEquals("rwx------", mode.apply(root.resolve("snapshots")));
      assertEquals("rwx------", mode.apply(root.resolve("remote")));
      assertEquals("rw-------", mode.apply(root.resolve("lock")));
      Path fs = Path.of(s.prepare("a", "", Map.of()).get(0).source());
      assertEquals("rwxr-xr-x", mode.apply(fs), "the container's / as containerd makes it");
      assertEquals("rwx------", mode.apply(fs.getParent()), "behind its 0700 parent");
      s.commit("c", "a", Map.of());
      List<SnapshotMount> child = s.prepare("b", "c", Map.of());
      String work = child.get(0).options().stream().filter(o -> o.startsWith("workdir=")).findFirst().orElseThrow();
      assertEquals("rwx------", mode.apply(Path.of(work.substring("workdir=".length()))));
    }
  }

  @Test
  void prepareCommitRemove_andTheMountsOfEachKind() throws Exception {
    try (OverlaySnapshotter s = open(RemoteLayers.NONE, new SnapshotterCounters())) {
      List<SnapshotMount> m = s.prepare("a", "", Map.of());
      assertEquals("bind", m.get(0).type());
      assertEquals(List.of("rw", "rbind"), m.get(0).options());
      Files.writeString(Path.of(m.get(0).source(), "f"), "x".repeat(10_000));
      s.commit("c", "a", Map.of("k", "v"));
      assertEquals(Kind.COMMITTED, s.stat("c").kind());
      assertEquals(4096 + 12288, s.usage("c")[0], "the directory and the file, in whole blocks");
      assertEquals(2, s.usage("c")[1]);
      List<SnapshotMount> child = s.prepare("b", "c", Map.of());
      assertEquals("overlay", child.get(0).type());
      assertTrue(child.get(0).options().contains("lowerdir=" + m.get(0).source()), child.toString());
      assertTrue(child.get(0).options().contains("index=off"), child.toString());
      assertEquals(List.of("ro", "rbind"), s.view("v", "c", Map.of()).get(0).options());
      SnapshotException e = assertThrows(SnapshotException.class, () -> s.remove("c"));
      assertEquals(SnapshotException.Code.FAILED_PRECONDITION, e.code());
      s.remove("b");
      s.remove("v");
      s.remove("c");
      s.awaitDeletions();
      try (var dirs = Files.list(root.resolve("snapshots"))) {
        assertEquals(0, dirs.count());
      }
    }
  }

  @Test
  void aRemotePrepare_commitsTheTargetAndAnswersAlreadyExists() throws Exception {
    FakeRemote remote = new FakeRemote();
    SnapshotterCounters metrics = new SnapshotterCounters();
    try (OverlaySnapshotter s = open(remote, metrics)) {
      SnapshotException e = assertThrows(SnapshotException.class,
          () -> s.prepare("extract-1", "", Map.of(OverlaySnapshotter.TARGET_LABEL, "chain-1", "remote", "yes")));
      assertEquals(SnapshotException.Code.ALREADY_EXISTS, e.code());
      assertEquals(Kind.COMMITTED, s.stat("chain-1").kind());
      assertEquals("remote snapshot", s.stat("chain-1").labels().get(OverlaySnapshotter.REMOTE_LABEL));
      assertThrows(SnapshotException.class, () -> s.stat("extract-1"));
      assertEquals(1, metrics.remoteSnapshots());
      // The layer's directory is the lower directory of a container on it.
      Path served = remote.served.iterator().next();
      assertTrue(s.prepare("container", "chain-1", Map.of()).get(0).options().contains("lowerdir=" + served));
    }
  }

  @Test
  void aRemoteMountThatFails_fallsBackToAnOrdinarySnapshot_andLeavesNoMountPoint() throws Exception {
    FakeRemote remote = new FakeRemote();
    remote.failMount = true;
    SnapshotterCounters metrics = new SnapshotterCounters();
    try (OverlaySnapshotter s = open(remote, metrics)) {
      List<SnapshotMount> m = s.prepare("extract-1", "", Map.of(OverlaySnapshotter.TARGET_LABEL, "chain-1", "remote", ""));
      assertEquals("bind", m.get(0).type());
      assertEquals(1, metrics.fallbacks("mount_failed"));
      try (var dirs = Files.list(root.resolve("remote"))) {
        assertEquals(0, dirs.count());
      }
      remote.failMount = false;
      remote.decision = RemoteDecision.fallback("plain_layer", "gzip without a TOC");
      s.prepare("extract-2", "", Map.of(OverlaySnapshotter.TARGET_LABEL, "chain-2", "remote", ""));
      assertEquals(1, metrics.fallbacks("plain_layer"));
    }
  }

  @Test
  void reopening_removesOrphans_andRemountsRemoteLayersNoLongerServed() throws Exception {
    FakeRemote remote = new FakeRemote();
    try (OverlaySnapshotter s = open(remote, new SnapshotterCounters())) {
      assertThrows(SnapshotException.class,
          () -> s.prepare("x", "", Map.of(OverlaySnapshotter.TARGET_LABEL, "chain", "remote", "")));
      s.prepare("kept", "", Map.of());
    }
    Files.createDirectories(root.resolve("snapshots/new-leftover/fs"));
    Files.createDirectories(root.resolve("snapshots/999/fs"));
    Files.createDirectories(root.resolve("remote/orphan"));
    Files.createDirectories(root.resolve("staging/12345-dead/victim"));
    Files.createFile(root.resolve("staging/12345-dead.lock"));
    remote.served.clear(); // the FUSE manager died with its mounts
    try (OverlaySnapshotter s = open(remote, new SnapshotterCounters())) {
      try (var dirs = Files.list(root.resolve("snapshots"))) {
        assertEquals(List.of("2"), dirs.map(p -> p.getFileName().toString()).toList());
      }
      assertFalse(Files.exists(root.resolve("remote/orphan")));
      assertFalse(Files.exists(root.resolve("staging/12345-dead")));
      assertEquals(1, remote.served.size(), "the remote snapshot is mounted again");
      assertEquals(Kind.ACTIVE, s.stat("kept").kind());
    }
  }

  @Test
  void secondDaemonOnTheSameRoot_isRefused() throws Exception {
    try (OverlaySnapshotter s = open(RemoteLayers.NONE, new SnapshotterCounters())) {
      IOException e = assertThrows(IOException.class, () -> open(RemoteLayers.NONE, new SnapshotterCounters()));
      assertTrue(e.getMessage().contains("another flatpull daemon"), e.getMessage());
    }
  }
}
