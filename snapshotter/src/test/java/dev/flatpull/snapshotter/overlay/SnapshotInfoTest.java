package dev.flatpull.snapshotter.overlay;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.snapshotter.store.Kind;
import dev.flatpull.snapshotter.store.Snapshot;
import dev.flatpull.snapshotter.store.SnapshotException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Instant;
import java.time.InstantSource;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A snapshot's Info as containerd's own storage keeps it ({@code snapshots/storage/bolt.go}, {@code
 * metadata/snapshot.go}): what Commit and Update write, for local and remote snapshots, on a clock the test moves.
 * containerd's conformance suite checks the same rules through the gRPC API (bin/conformance).
 */
class SnapshotInfoTest {
  @TempDir Path root;
  private final AtomicReference<Instant> now = new AtomicReference<>(Instant.parse("2026-12-04T10:00:00.000001Z"));
  private final OverlaySnapshotterTest.FakeRemote remote = new OverlaySnapshotterTest.FakeRemote();
  private OverlaySnapshotter snapshotter;

  @BeforeEach
  void open() throws Exception {
    snapshotter = open(root);
  }

  private OverlaySnapshotter open(Path at) throws Exception {
    InstantSource clock = now::get;
    return OverlaySnapshotter.open(at, remote, new SnapshotterCounters(),
        OverlaySnapshotter.Environment.of(System::nanoTime, clock));
  }

  @AfterEach
  void close() throws Exception {
    snapshotter.close();
  }

  private Instant later(long micros) {
    return now.updateAndGet(t -> t.plusNanos(micros * 1000));
  }

  @Test
  void commit_datesTheCommittedSnapshotAtTheCommit_createdEqualsUpdated() throws Exception {
    snapshotter.prepare("a", "", Map.of());
    Instant committed = later(90_000_000);
    snapshotter.commit("c", "a", Map.of());
    Snapshot c = snapshotter.stat("c");
    assertEquals(committed, c.created());
    assertEquals(committed, c.updated());
  }

  @Test
  void commit_labelsAreTheOnesGivenToCommit_noneInheritedFromTheActiveSnapshot() throws Exception {
    snapshotter.prepare("a", "", Map.of("from-prepare", "x", "both", "prepare"));
    snapshotter.commit("c", "a", Map.of("both", "commit", "from-commit", "y"));
    assertEquals(Map.of("both", "commit", "from-commit", "y"), snapshotter.stat("c").labels());
  }

  /** Times keep microseconds: a snapshot dated in the millisecond of the call that made it, but before it, was not. */
  @Test
  void times_keepTheClocksPrecision() throws Exception {
    now.set(Instant.parse("2026-12-04T10:00:00.123456789Z"));
    snapshotter.prepare("a", "", Map.of());
    assertEquals(Instant.parse("2026-12-04T10:00:00.123456789Z"), snapshotter.stat("a").created());
  }

  @Test
  void update_labelsPath_replacesAllLabels() throws Exception {
    snapshotter.prepare("a", "", Map.of("l1", "v1", "l2", "v2"));
    Snapshot s = snapshotter.update("a", Map.of("l3", "v3"), List.of("labels"));
    assertEquals(Map.of("l3", "v3"), s.labels());
  }

  @Test
  void update_noPaths_replacesAllLabels() throws Exception {
    snapshotter.prepare("a", "", Map.of("l1", "v1", "l2", "v2"));
    Snapshot s = snapshotter.update("a", Map.of("l3", "v3"), List.of());
    assertEquals(Map.of("l3", "v3"), s.labels());
  }

  @Test
  void update_labelKeyPaths_setThatLabel_orDeleteItWhenTheRequestLacksIt() throws Exception {
    snapshotter.prepare("a", "", Map.of("l1", "v1", "l2", "v2", "l3", "v3"));
    // As containerd's suite: l1 set, l2 named but absent (deleted), l4 given but not named (ignored), l3 untouched.
    Snapshot s = snapshotter.update("a", Map.of("l1", "updated", "l4", "v4"), List.of("labels.l1", "labels.l2"));
    assertEquals(Map.of("l1", "updated", "l3", "v3"), s.labels());
  }

  @Test
  void update_pathsApplyInOrder() throws Exception {
    snapshotter.prepare("a", "", Map.of("keep", "old"));
    Snapshot s = snapshotter.update("a", Map.of("l1", "v1"), List.of("labels.keep", "labels"));
    assertEquals(Map.of("l1", "v1"), s.labels());
  }

  @Test
  void update_anyOtherPath_isAnInvalidArgument_andChangesNothing() throws Exception {
    snapshotter.prepare("a", "", Map.of("l1", "v1"));
    Instant before = snapshotter.stat("a").updated();
    for (List<String> paths : List.of(List.of("parent"), List.of("name"), List.of("kind"), List.of("created"),
        List.of("labels."), List.of("labels", "parent"), List.of("labels.l1", "updated"))) {
      later(1);
      SnapshotException e = assertThrows(SnapshotException.class,
          () -> snapshotter.update("a", Map.of("l1", "changed"), paths), paths.toString());
      assertEquals(SnapshotException.Code.INVALID_ARGUMENT, e.code(), paths.toString());
      assertEquals(Map.of("l1", "v1"), snapshotter.stat("a").labels(), paths.toString());
      assertEquals(before, snapshotter.stat("a").updated(), paths.toString());
    }
  }

  @Test
  void update_datesTheUpdate_andNeverChangesCreatedParentKindOrName() throws Exception {
    snapshotter.prepare("a", "", Map.of());
    snapshotter.commit("c", "a", Map.of());
    snapshotter.prepare("child", "c", Map.of());
    Snapshot before = snapshotter.stat("child");
    Instant updated = later(5_000);
    Snapshot after = snapshotter.update("child", Map.of("l", "v"), List.of("labels"));
    assertEquals(updated, after.updated());
    assertEquals(before.created(), after.created());
    assertEquals(Optional.of("c"), after.parent());
    assertEquals(Kind.ACTIVE, after.kind());
    assertEquals("child", after.name());
    assertEquals(after, snapshotter.stat("child"));
  }

  @Test
  void aRemoteSnapshot_isCreatedAndUpdatedWhenPrepared_holdsNoBytes_andKeepsItsMarkerThroughUpdates()
      throws Exception {
    Instant prepared = later(1);
    assertThrows(SnapshotException.class,
        () -> snapshotter.prepare("extract", "", Map.of(OverlaySnapshotter.TARGET_LABEL, "layer", "remote", "yes")));
    Snapshot layer = snapshotter.stat("layer");
    assertEquals(prepared, layer.created());
    assertEquals(prepared, layer.updated());
    assertEquals(Kind.COMMITTED, layer.kind());
    assertEquals(0, snapshotter.usage("layer")[0]);
    assertEquals(0, snapshotter.usage("layer")[1]);

    Instant updated = later(7);
    Snapshot after = snapshotter.update("layer", Map.of("l", "v"), List.of("labels"));
    assertEquals(Map.of("l", "v", OverlaySnapshotter.REMOTE_LABEL, "remote snapshot"), after.labels());
    assertEquals(prepared, after.created());
    assertEquals(updated, after.updated());
  }

  @Test
  void aContainersSnapshotOnARemoteLayer_countsItsUpperDirectory() throws Exception {
    assertThrows(SnapshotException.class,
        () -> snapshotter.prepare("extract", "", Map.of(OverlaySnapshotter.TARGET_LABEL, "layer", "remote", "yes")));
    List<SnapshotMount> m = snapshotter.prepare("container", "layer", Map.of());
    String upper = m.get(0).options().stream().filter(o -> o.startsWith("upperdir=")).findFirst().orElseThrow()
        .substring("upperdir=".length());
    Files.writeString(Path.of(upper, "written"), "x".repeat(10_000));
    long[] usage = snapshotter.usage("container");
    assertEquals(4096 + 12288, usage[0], "the directory and the file, in whole blocks");
    assertEquals(2, usage[1]);
  }

  /** The container's root directory is 0755 whatever the daemon's umask, as containerd's overlay snapshotter has it. */
  @Test
  void aPreparedSnapshotsRoot_is0755() throws Exception {
    List<SnapshotMount> m = snapshotter.prepare("a", "", Map.of());
    assertEquals("rwxr-xr-x", PosixFilePermissions.toString(Files.getPosixFilePermissions(Path.of(m.get(0).source()))));
  }

  /** A store written by an earlier flatpull (schema 1, milliseconds) opens with the same times. */
  @Test
  void aStoreOfSchemaVersion1_isMigrated_keepingEverySnapshotsTimes() throws Exception {
    Path old = root.resolve("old");
    Files.createDirectories(old);
    try (Connection c = DriverManager.getConnection("jdbc:sqlite:" + old.resolve("metadata.db"));
        Statement s = c.createStatement()) {
      s.execute("""
          CREATE TABLE snapshots (
            id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
            parent INTEGER REFERENCES snapshots(id) ON DELETE RESTRICT, kind TEXT NOT NULL,
            created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, labels TEXT NOT NULL,
            usage_bytes INTEGER NOT NULL DEFAULT 0, usage_inodes INTEGER NOT NULL DEFAULT 0,
            remote_mount TEXT, remote_ref TEXT, remote_descriptor TEXT)""");
      s.execute("INSERT INTO snapshots (name, kind, created_ms, updated_ms, labels, usage_bytes) VALUES"
          + " ('c', 'COMMITTED', 1764842400123, 1764842400456, '{\"k\":\"v\"}', 4096)");
      s.execute("PRAGMA user_version=1");
    }
    Files.createDirectories(old.resolve("snapshots/1/fs"));
    try (OverlaySnapshotter migrated = open(old)) {
      Snapshot c = migrated.stat("c");
      assertEquals(Instant.ofEpochMilli(1764842400123L), c.created());
      assertEquals(Instant.ofEpochMilli(1764842400456L), c.updated());
      assertEquals(Map.of("k", "v"), c.labels());
      migrated.prepare("new", "c", Map.of());
      assertTrue(migrated.stat("new").created().isAfter(c.created()));
    }
  }
}
