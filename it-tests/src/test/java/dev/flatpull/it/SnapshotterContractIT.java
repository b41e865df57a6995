package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.FieldMask;
import dev.flatpull.core.Await;
import dev.flatpull.snapshotter.api.snapshots.v1.CommitSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.Info;
import dev.flatpull.snapshotter.api.snapshots.v1.Kind;
import dev.flatpull.snapshotter.api.snapshots.v1.ListSnapshotsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.MountsRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.PrepareSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.RemoveSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.SnapshotsGrpc;
import dev.flatpull.snapshotter.api.snapshots.v1.StatSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.UpdateSnapshotRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.UsageRequest;
import dev.flatpull.snapshotter.api.snapshots.v1.ViewSnapshotRequest;
import dev.flatpull.snapshotter.api.types.Mount;
import dev.flatpull.endpoints.grpc.UnixSockets;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * containerd's snapshotter contract (after containerd's own snapshotter test suite), run over gRPC against the real
 * daemon, with every mount it returns really mounted.
 */
class SnapshotterContractIT {
  private static final Cleanup cleanup = new Cleanup();
  private static FlatpullDaemon flatpull;
  private static ManagedChannel channel;
  private static SnapshotsGrpc.SnapshotsBlockingStub api;
  private final List<Path> mounted = new ArrayList<>();

  @BeforeAll
  static void start() throws Exception {
    flatpull = cleanup.add(FlatpullDaemon.start(""));
    channel = UnixSockets.connect(flatpull.socket());
    cleanup.add(channel::shutdownNow);
    api = SnapshotsGrpc.newBlockingStub(channel);
  }

  @AfterAll
  static void stop() throws IOException {
    cleanup.close();
  }

  @AfterEach
  void unmount() throws Exception {
    for (int i = mounted.size() - 1; i >= 0; i--) {
      Processes.run(List.of("umount", mounted.get(i).toString()), 30);
      Processes.deleteTree(mounted.get(i));
    }
    mounted.clear();
  }

  @Test
  void prepareCommitViewAndChild_haveOverlaySemantics() throws Exception {
    String base = unique("base");
    Path m1 = mount(prepare(base, "", Map.of()));
    Files.writeString(m1.resolve("hello"), "from base");
    Files.createDirectories(m1.resolve("dir"));
    Files.writeString(m1.resolve("dir/gone"), "deleted by the child");
    umount(m1);
    String committed = unique("committed");
    api.commit(CommitSnapshotRequest.newBuilder().setKey(base).setName(committed).putLabels("l", "v").build());
    Info info = stat(committed);
    assertEquals(Kind.COMMITTED, info.getKind());
    assertEquals("v", info.getLabelsOrThrow("l"));
    assertStatus(Status.Code.NOT_FOUND, () -> stat(base));

    Path view = mount(api.view(ViewSnapshotRequest.newBuilder().setKey(unique("view")).setParent(committed).build())
        .getMountsList());
    assertEquals("from base", Files.readString(view.resolve("hello")));
    assertThrows(IOException.class, () -> Files.writeString(view.resolve("x"), "read-only"));

    String child = unique("child");
    Path c = mount(prepare(child, committed, Map.of()));
    assertEquals("from base", Files.readString(c.resolve("hello")));
    Files.delete(c.resolve("dir/gone"));
    Files.writeString(c.resolve("new"), "x".repeat(1 << 20));
    var usage = api.usage(UsageRequest.newBuilder().setKey(child).build());
    assertTrue(usage.getSize() >= 1 << 20, "usage " + usage);
    assertTrue(usage.getInodes() >= 2, "usage " + usage);
    umount(c);
    String top = unique("top");
    api.commit(CommitSnapshotRequest.newBuilder().setKey(child).setName(top).build());
    assertEquals(committed, stat(top).getParent());
    Path v2 = mount(api.view(ViewSnapshotRequest.newBuilder().setKey(unique("view2")).setParent(top).build())
        .getMountsList());
    assertFalse(Files.exists(v2.resolve("dir/gone")), "a whiteout of the child hides the parent's file");
    assertEquals(1 << 20, Files.size(v2.resolve("new")));
  }

  @Test
  void removingAParentWithChildren_fails_andLeavesItUsable() throws Exception {
    String parent = committed(unique("p"), "");
    String child = unique("c");
    prepare(child, parent, Map.of());
    assertStatus(Status.Code.FAILED_PRECONDITION, () -> api.remove(RemoveSnapshotRequest.newBuilder().setKey(parent).build()));
    assertEquals(Kind.COMMITTED, stat(parent).getKind());
    api.remove(RemoveSnapshotRequest.newBuilder().setKey(child).build());
    api.remove(RemoveSnapshotRequest.newBuilder().setKey(parent).build());
    assertStatus(Status.Code.NOT_FOUND, () -> stat(parent));
  }

  @Test
  void updateLabels_withAndWithoutMask_andListFilters() throws Exception {
    String name = committed(unique("u"), "");
    api.update(UpdateSnapshotRequest.newBuilder().setInfo(Info.newBuilder().setName(name)
        .putLabels("a", "1").putLabels("b", "2")).build());
    assertEquals(Map.of("a", "1", "b", "2"), stat(name).getLabelsMap());
    api.update(UpdateSnapshotRequest.newBuilder().setInfo(Info.newBuilder().setName(name).putLabels("b", "3"))
        .setUpdateMask(FieldMask.newBuilder().addPaths("labels.b").addPaths("labels.a")).build());
    assertEquals(Map.of("b", "3"), stat(name).getLabelsMap());
    assertStatus(Status.Code.INVALID_ARGUMENT, () -> api.update(UpdateSnapshotRequest.newBuilder()
        .setInfo(Info.newBuilder().setName(name)).setUpdateMask(FieldMask.newBuilder().addPaths("parent")).build()));

    List<String> found = list("labels.b==3");
    assertEquals(List.of(name), found);
    assertTrue(list("name==" + name + ",kind==committed").contains(name));
    assertTrue(list("parent==\"\",labels.\"b\"").contains(name));
    assertStatus(Status.Code.INVALID_ARGUMENT, () -> list("colour==red"));
  }

  @Test
  void aChainOf128Layers_mounts() throws Exception {
    String parent = "";
    for (int i = 0; i < 128; i++) {
      String key = unique("layer" + i);
      Path m = mount(prepare(key, parent, Map.of()));
      Files.writeString(m.resolve("layer" + i), Integer.toString(i));
      umount(m);
      parent = unique("committed" + i);
      api.commit(CommitSnapshotRequest.newBuilder().setKey(key).setName(parent).build());
    }
    List<Mount> mounts = prepare(unique("top"), parent, Map.of());
    assertEquals(128, mounts.get(0).getOptionsList().stream().filter(o -> o.startsWith("lowerdir="))
        .findFirst().orElseThrow().split(":").length);
    Path m = mount(mounts);
    for (int i = 0; i < 128; i++) {
      assertEquals(Integer.toString(i), Files.readString(m.resolve("layer" + i)));
    }
  }

  @Test
  void badInput_getsContainerdsCodes_andLeavesNothingBehind() throws Exception {
    long dirsBefore = snapshotDirs();
    assertStatus(Status.Code.INVALID_ARGUMENT, () -> prepare("", "", Map.of()));
    assertStatus(Status.Code.NOT_FOUND, () -> prepare(unique("orphan"), "no-such-parent", Map.of()));
    String active = unique("active");
    prepare(active, "", Map.of());
    assertStatus(Status.Code.ALREADY_EXISTS, () -> prepare(active, "", Map.of()));
    assertStatus(Status.Code.INVALID_ARGUMENT, () -> prepare(unique("x"), active, Map.of()));
    assertStatus(Status.Code.INVALID_ARGUMENT, () -> prepare(unique("x"), "", Map.of("big", "v".repeat(5000))));
    String view = unique("view");
    api.view(ViewSnapshotRequest.newBuilder().setKey(view).build());
    assertStatus(Status.Code.FAILED_PRECONDITION,
        () -> api.commit(CommitSnapshotRequest.newBuilder().setKey(view).setName(unique("n")).build()));
    assertStatus(Status.Code.NOT_FOUND, () -> api.remove(RemoveSnapshotRequest.newBuilder().setKey("nope").build()));
    assertStatus(Status.Code.NOT_FOUND, () -> api.mounts(MountsRequest.newBuilder().setKey("nope").build()));
    // Keys are names, never paths.
    String pathLike = "../../../../../../tmp/flatpull-escape-" + UUID.randomUUID();
    Path m = mount(prepare(pathLike, "", Map.of()));
    assertTrue(m.toString().startsWith(m.toString()));
    assertEquals(pathLike, stat(pathLike).getName());
    assertFalse(Files.exists(Path.of("/tmp").resolve(Path.of(pathLike).getFileName())));
    umount(m);
    for (String k : List.of(active, view, pathLike)) {
      api.remove(RemoveSnapshotRequest.newBuilder().setKey(k).build());
    }
    Await.until(Duration.ofSeconds(5), () -> snapshotDirs() == dirsBefore,
        () -> "snapshot directories left behind: " + dirsBefore + " before");
  }

  @Test
  void remoteLabelsThatCannotBeServed_fallBackToAnOrdinarySnapshot() throws Exception {
    long dirsBefore = snapshotDirs();
    String target = unique("sha256-target");
    // Malformed: not a reference, not a digest.
    List<Mount> m1 = prepare(unique("extract"), "", Map.of("containerd.io/snapshot.ref", target,
        "containerd.io/snapshot/remote/stargz.reference", "::not a reference::",
        "containerd.io/snapshot/remote/stargz.digest", "sha256:nothex"));
    assertEquals("bind", m1.get(0).getType());
    // A registry that is gone: nothing listens on the port any more.
    int deadPort = Processes.freePort();
    List<Mount> m2 = prepare(unique("extract"), "", Map.of("containerd.io/snapshot.ref", unique("t2"),
        "containerd.io/snapshot/cri.image-ref", "127.0.0.1:" + deadPort + "/gone/image:1",
        "containerd.io/snapshot/cri.layer-digest", "sha256:" + "ab".repeat(32)));
    assertEquals("bind", m2.get(0).getType());
    assertStatus(Status.Code.NOT_FOUND, () -> stat(target));
    try (var s = Files.list(flatpull.root().resolve("remote"))) {
      assertEquals(0, s.count(), "a remote mount point was left behind");
    }
    assertEquals(dirsBefore + 2, snapshotDirs());
    assertEquals(List.of(), dev.flatpull.core.MountTable.under(flatpull.root().resolve("remote")));
  }

  private List<Mount> prepare(String key, String parent, Map<String, String> labels) {
    return api.prepare(PrepareSnapshotRequest.newBuilder().setKey(key).setParent(parent).putAllLabels(labels).build())
        .getMountsList();
  }

  private String committed(String name, String parent) {
    String key = unique("k");
    prepare(key, parent, Map.of());
    api.commit(CommitSnapshotRequest.newBuilder().setKey(key).setName(name).build());
    return name;
  }

  private Info stat(String key) {
    return api.stat(StatSnapshotRequest.newBuilder().setKey(key).build()).getInfo();
  }

  private List<String> list(String filter) {
    List<String> names = new ArrayList<>();
    api.list(ListSnapshotsRequest.newBuilder().addFilters(filter).build())
        .forEachRemaining(r -> r.getInfoList().forEach(i -> names.add(i.getName())));
    return names;
  }

  /**
   * Mounts as containerd does, including its trick for long overlay option strings: run mount(8) in the lower
   * directories' common parent and name them relative to it, which keeps 128 lower directories under one page.
   */
  private Path mount(List<Mount> mounts) throws Exception {
    assertEquals(1, mounts.size());
    Mount m = mounts.get(0);
    Path target = Files.createTempDirectory("flatpull-contract-mnt");
    mounted.add(target);
    List<String> options = new ArrayList<>(m.getOptionsList());
    Path cwd = Path.of("/");
    if (m.getType().equals("overlay")) {
      Path snapshots = flatpull.root().resolve("snapshots");
      cwd = snapshots;
      for (int i = 0; i < options.size(); i++) {
        if (options.get(i).startsWith("lowerdir=")) {
          List<String> rel = new ArrayList<>();
          for (String dir : options.get(i).substring(9).split(":")) {
            rel.add(snapshots.relativize(Path.of(dir)).toString());
          }
          options.set(i, "lowerdir=" + String.join(":", rel));
        }
      }
    }
    List<String> cmd = new ArrayList<>(List.of("mount", "-t", m.getType().equals("bind") ? "none" : m.getType()));
    if (m.getType().equals("bind")) {
      options.replaceAll(o -> o.equals("rbind") ? "bind" : o);
    }
    cmd.addAll(List.of("-o", String.join(",", options), m.getSource(), target.toString()));
    Process p = new ProcessBuilder(cmd).directory(cwd.toFile()).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes());
    assertEquals(0, p.waitFor(), String.join(" ", cmd) + ": " + out);
    if (m.getType().equals("bind") && options.contains("ro")) {
      Processes.run(List.of("mount", "-o", "remount,bind,ro", target.toString()), 30);
    }
    return target;
  }

  private void umount(Path target) throws Exception {
    Processes.run(List.of("umount", target.toString()), 30).orThrow(List.of("umount", target.toString()));
    mounted.remove(target);
    Processes.deleteTree(target);
  }

  private static long snapshotDirs() throws IOException {
    try (var s = Files.list(flatpull.root().resolve("snapshots"))) {
      return s.count();
    }
  }

  private static String unique(String prefix) {
    return "default/1/" + prefix + "-" + UUID.randomUUID();
  }

  private static void assertStatus(Status.Code code, org.junit.jupiter.api.function.Executable call) {
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, call);
    assertEquals(code, e.getStatus().getCode(), e.getStatus().toString());
  }
}
