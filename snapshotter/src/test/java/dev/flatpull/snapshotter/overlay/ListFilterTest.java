package dev.flatpull.snapshotter.overlay;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.snapshotter.store.Kind;
import dev.flatpull.snapshotter.store.Snapshot;
import dev.flatpull.snapshotter.store.SnapshotException;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class ListFilterTest {
  private static Snapshot snapshot(String name, String parent, Map<String, String> labels) {
    return new Snapshot(1, name, Optional.ofNullable(parent), Kind.COMMITTED, Instant.EPOCH, Instant.EPOCH, labels, 0, 0,
        Optional.empty(), Optional.empty());
  }

  @Test
  void theUnpackersRemoteLookup_matchesAParentlessTarget() throws SnapshotException {
    ListFilter f = ListFilter.parse(List.of("labels.\"containerd.io/snapshot.ref\"==sha256:ab,parent==\"\""));
    assertTrue(f.matches(snapshot("t", null, Map.of("containerd.io/snapshot.ref", "sha256:ab"))));
    assertFalse(f.matches(snapshot("t", "p", Map.of("containerd.io/snapshot.ref", "sha256:ab"))));
    assertFalse(f.matches(snapshot("t", null, Map.of("containerd.io/snapshot.ref", "sha256:cd"))));
  }

  @Test
  void filtersAreOredAndSelectorsAnded() throws SnapshotException {
    ListFilter f = ListFilter.parse(List.of("name==a,kind==committed", "labels.x"));
    assertTrue(f.matches(snapshot("a", null, Map.of())));
    assertTrue(f.matches(snapshot("b", null, Map.of("x", ""))));
    assertFalse(f.matches(snapshot("b", null, Map.of())));
    assertTrue(ListFilter.parse(List.of("name~=^de.*t$")).matches(snapshot("default/1/t", null, Map.of())));
    assertTrue(ListFilter.parse(List.of("name!=a")).matches(snapshot("b", null, Map.of())));
    assertTrue(ListFilter.parse(List.of()).matches(snapshot("b", null, Map.of())));
  }

  @Test
  void unknownFieldsAndBadRegexes_areInvalidArguments() {
    assertEquals(SnapshotException.Code.INVALID_ARGUMENT,
        assertThrows(SnapshotException.class, () -> ListFilter.parse(List.of("colour==red"))).code());
    assertEquals(SnapshotException.Code.INVALID_ARGUMENT,
        assertThrows(SnapshotException.class, () -> ListFilter.parse(List.of("name~=("))).code());
  }
}
