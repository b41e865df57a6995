package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.snapshotter.api.snapshots.v1.CommitSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.Info;
import dev.flatpull.snapshotter.api.snapshots.v1.Kind;
import dev.flatpull.snapshotter.api.snapshots.v1.ListSnapshotsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.MountsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.PrepareSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.RemoveSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.SnapshotsGrpc;
import dev.flatpull.snapshotter.api.snapshots.v1.ViewSnapshotRequest;
import dev.flatpull.snapshotter.api.types.Mount;
import dev.flatpull.endpoints.grpc.UnixSockets;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * kill -9 of the daemon at random instants of a stream of prepare/commit/remove/view calls, again and again: after
 * every restart the metadata agrees with every acknowledged call, each snapshot's directories exist, and nothing
 * unreferenced is left on disk.
 */
class CrashRecoveryIT {
  private static final int ROUNDS = Integer.getInteger("flatpull.crash.rounds", 15);
  private static final Cleanup cleanup = new Cleanup();
  private static FlatpullDaemon flatpull;

  /** What the client was told: name to kind, for acknowledged calls; in-flight calls may have gone either way. */
  private static final Map<String, Kind> model = new ConcurrentHashMap<>();
  private static final Map<String, String> parents = new ConcurrentHashMap<>();

  @BeforeAll
  static void start() throws Exception {
    flatpull = cleanup.add(FlatpullDaemon.start(""));
  }

  @AfterAll
  static void stop() throws IOException {
    cleanup.close();
  }

  @Test
  void killedAnywhere_restartsConsistent() throws Exception {
    long seed = Long.getLong("flatpull.crash.seed", System.nanoTime());
    System.out.println("CrashRecoveryIT seed " + seed + " (rerun with -Dflatpull.crash.seed=" + seed + ")");
    Random random = new Random(seed);
    int totalOps = 0;
    for (int round = 0; round < ROUNDS; round++) {
      AtomicReference<String> inFlight = new AtomicReference<>();
      int[] ops = {0};
      Random r = new Random(random.nextLong());
      Thread worker = new Thread(() -> work(r, inFlight, ops), "crash-client");
      worker.start();
      Thread.sleep(150 + random.nextInt(900));
      flatpull.kill9();
      worker.join(30_000);
      totalOps += ops[0];
      flatpull.start();
      reconcile(inFlight.get());
      verify();
    }
    System.out.printf("%d rounds, %d acknowledged calls, %d snapshots at the end%n", ROUNDS, totalOps, model.size());
    assertTrue(totalOps > ROUNDS * 5, "too few calls between kills to exercise anything: " + totalOps);
    // Each start extracted SQLite's native library under the root, where a later start deletes what a killed one left
    // a minute before (SqliteNativeLibraryTest), not into /tmp, where nothing ever did. These restarts all fall within
    // a minute or two, so their copies may all still be there.
    try (var native_ = Files.list(flatpull.root().resolve("native"))) {
      long extracted = native_.filter(f -> f.getFileName().toString().endsWith("libsqlitejdbc.so")).count();
      assertTrue(extracted >= 1, "no native library under the root");
    }
  }

  /** The daemon halts at one named instant of an operation (see CrashPoint); the restart must repair it. */
  @org.junit.jupiter.params.ParameterizedTest
  @org.junit.jupiter.params.provider.ValueSource(strings = {"PREPARE_DIRECTORY_CREATED", "PREPARE_DIRECTORY_PLACED",
      "COMMIT_MEASURED", "REMOVE_METADATA_COMMITTED", "REMOVE_STAGED"})
  void haltedAtACrashPoint_restartsConsistent(String point) throws Exception {
    flatpull.kill9();
    flatpull.start(List.of("-Dflatpull.crashpoint=" + point));
    ManagedChannel ch = UnixSockets.connect(flatpull.socket());
    String inFlight;
    try {
      SnapshotsGrpc.SnapshotsBlockingStub api = SnapshotsGrpc.newBlockingStub(ch);
      String parent = "";
      if (!point.startsWith("PREPARE")) {
        String key = "default/1/a-" + point;
        fill(api.prepare(PrepareSnapshotRequest.newBuilder().setKey(key).build()).getMountsList(), new Random(1));
        model.put(key, Kind.ACTIVE);
        parents.put(key, "");
        if (point.startsWith("COMMIT")) {
          inFlight = key + "\n" + "default/1/c-" + point;
          String name = "default/1/c-" + point;
          assertCrashes(() -> api.commit(CommitSnapshotRequest.newBuilder().setKey(key).setName(name).build()));
        } else {
          String name = "default/1/c-" + point;
          api.commit(CommitSnapshotRequest.newBuilder().setKey(key).setName(name).build());
          model.remove(key);
          model.put(name, Kind.COMMITTED);
          parents.put(name, parents.remove(key));
          inFlight = name;
          assertCrashes(() -> api.remove(RemoveSnapshotRequest.newBuilder().setKey(name).build()));
        }
      } else {
        inFlight = "default/1/p-" + point;
        String key = inFlight;
        String p = parent;
        assertCrashes(() -> api.prepare(PrepareSnapshotRequest.newBuilder().setKey(key).setParent(p).build()));
      }
    } finally {
      ch.shutdownNow();
    }
    assertEquals(137, flatpull.awaitExit(), "the daemon did not halt at " + point);
    flatpull.start();
    reconcile(inFlight);
    verify();
    if (point.startsWith("REMOVE")) {
      assertTrue(!model.containsKey(inFlight), "a removal that reached " + point + " must stay done");
    }
  }

  private static void assertCrashes(org.junit.jupiter.api.function.Executable call) {
    StatusRuntimeException e = org.junit.jupiter.api.Assertions.assertThrows(StatusRuntimeException.class, call);
    assertEquals(io.grpc.Status.Code.UNAVAILABLE, e.getStatus().getCode(), e.toString());
  }

  private void work(Random r, AtomicReference<String> inFlight, int[] ops) {
    ManagedChannel ch = UnixSockets.connect(flatpull.socket());
    SnapshotsGrpc.SnapshotsBlockingStub api = SnapshotsGrpc.newBlockingStub(ch);
    try {
      while (true) {
        List<String> committed = model.entrySet().stream().filter(e -> e.getValue() == Kind.COMMITTED)
            .map(Map.Entry::getKey).sorted().toList();
        List<String> active = model.entrySet().stream().filter(e -> e.getValue() == Kind.ACTIVE)
            .map(Map.Entry::getKey).sorted().toList();
        int choice = r.nextInt(10);
        if (choice < 4 || model.isEmpty()) {
          String key = "default/1/a-" + Long.toHexString(r.nextLong());
          String parent = committed.isEmpty() || r.nextBoolean() ? "" : committed.get(r.nextInt(committed.size()));
          inFlight.set(key);
          List<Mount> m = api.prepare(PrepareSnapshotRequest.newBuilder().setKey(key).setParent(parent).build())
              .getMountsList();
          model.put(key, Kind.ACTIVE);
          parents.put(key, parent);
          fill(m, r);
        } else if (choice < 7 && !active.isEmpty()) {
          String key = active.get(r.nextInt(active.size()));
          String name = "default/1/c-" + Long.toHexString(r.nextLong());
          inFlight.set(key + "\n" + name);
          api.commit(CommitSnapshotRequest.newBuilder().setKey(key).setName(name).build());
          model.remove(key);
          model.put(name, Kind.COMMITTED);
          parents.put(name, parents.remove(key));
        } else if (choice < 9) {
          List<String> leaves = model.keySet().stream().filter(k -> !parents.containsValue(k)).sorted().toList();
          if (leaves.isEmpty()) {
            continue;
          }
          String key = leaves.get(r.nextInt(leaves.size()));
          inFlight.set(key);
          api.remove(RemoveSnapshotRequest.newBuilder().setKey(key).build());
          model.remove(key);
          parents.remove(key);
        } else if (!committed.isEmpty()) {
          String key = "default/1/v-" + Long.toHexString(r.nextLong());
          String parent = committed.get(r.nextInt(committed.size()));
          inFlight.set(key);
          api.view(ViewSnapshotRequest.newBuilder().setKey(key).setParent(parent).build());
          model.put(key, Kind.VIEW);
          parents.put(key, parent);
        }
        inFlight.set(null);
        ops[0]++;
      }
    } catch (StatusRuntimeException | IOException killed) {
      // The daemon died under us: inFlight names the call whose outcome is unknown.
    } finally {
      ch.shutdownNow();
    }
  }

  /** Writes a few files into an active snapshot's upper directory, so commits measure and removals delete. */
  private static void fill(List<Mount> mounts, Random r) throws IOException {
    Mount m = mounts.get(0);
    String upper = m.getType().equals("bind") ? m.getSource() : m.getOptionsList().stream()
        .filter(o -> o.startsWith("upperdir=")).map(o -> o.substring(9)).findFirst().orElseThrow();
    for (int i = 0; i < 1 + r.nextInt(20); i++) {
      Files.write(Path.of(upper, "f" + i), new byte[r.nextInt(64 << 10)]);
    }
  }

  /** Learns how the call in flight at the kill went; both outcomes are fine, only a mixture is not. */
  private void reconcile(String inFlight) throws IOException {
    Map<String, Info> actual = listAll();
    if (inFlight == null) {
      return;
    }
    String[] names = inFlight.split("\n");
    if (names.length == 2) { // commit key -> name
      boolean committed = actual.containsKey(names[1]);
      assertTrue(committed != actual.containsKey(names[0]), "commit half done: " + inFlight + " " + actual.keySet());
      if (committed) {
        model.remove(names[0]);
        model.put(names[1], Kind.COMMITTED);
        parents.put(names[1], parents.remove(names[0]));
      }
      return;
    }
    Info info = actual.get(names[0]);
    if (info == null) {
      model.remove(names[0]);
      parents.remove(names[0]);
    } else {
      model.put(names[0], info.getKind());
      parents.put(names[0], info.getParent());
    }
  }

  private void verify() throws IOException {
    Map<String, Info> actual = listAll();
    assertEquals(new java.util.TreeSet<>(model.keySet()), new java.util.TreeSet<>(actual.keySet()));
    ManagedChannel ch = UnixSockets.connect(flatpull.socket());
    try {
      SnapshotsGrpc.SnapshotsBlockingStub api = SnapshotsGrpc.newBlockingStub(ch);
      for (Info i : actual.values()) {
        assertEquals(model.get(i.getName()), i.getKind(), i.getName());
        assertEquals(parents.getOrDefault(i.getName(), ""), i.getParent(), i.getName());
        for (Mount m : api.mounts(MountsRequest.newBuilder().setKey(i.getName()).build()).getMountsList()) {
          for (Path dir : paths(m)) {
            assertTrue(Files.isDirectory(dir), i.getName() + ": " + dir + " is missing");
          }
        }
      }
    } finally {
      ch.shutdownNow();
    }
    try (var s = Files.list(flatpull.root().resolve("snapshots"))) {
      List<String> dirs = s.map(p -> p.getFileName().toString()).toList();
      assertEquals(actual.size(), dirs.size(), "orphaned snapshot directories: " + dirs);
      assertTrue(dirs.stream().allMatch(d -> d.matches("\\d+")), dirs.toString());
    }
    try (var s = Files.list(flatpull.root().resolve("staging"))) {
      assertTrue(s.count() <= 2, "abandoned staging directories were not removed");
    }
  }

  private static List<Path> paths(Mount m) {
    List<Path> out = new ArrayList<>();
    if (m.getType().equals("bind")) {
      out.add(Path.of(m.getSource()));
    }
    for (String o : m.getOptionsList()) {
      if (o.startsWith("upperdir=") || o.startsWith("workdir=")) {
        out.add(Path.of(o.substring(o.indexOf('=') + 1)));
      } else if (o.startsWith("lowerdir=")) {
        for (String d : o.substring(9).split(":")) {
          out.add(Path.of(d));
        }
      }
    }
    return out;
  }

  private static Map<String, Info> listAll() throws IOException {
    ManagedChannel ch = UnixSockets.connect(flatpull.socket());
    try {
      Map<String, Info> out = new HashMap<>();
      SnapshotsGrpc.newBlockingStub(ch).list(ListSnapshotsRequest.getDefaultInstance())
          .forEachRemaining(r -> r.getInfoList().forEach(i -> out.put(i.getName(), i)));
      return out;
    } catch (StatusRuntimeException e) {
      throw new IOException(e);
    } finally {
      ch.shutdownNow();
    }
  }
}
