package dev.flatpull.snapshotter.remote;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;

class RemoteLabelsTest {
  private static final String DIGEST = "sha256:" + "ab".repeat(32);
  private static final String MANIFEST = "sha256:" + "cd".repeat(32);

  @Test
  void criLabels_winOverStargzLabels_andCarryTheManifest() {
    RemoteLabels l = RemoteLabels.parse(Map.of(
        RemoteLabels.CRI_IMAGE_REF, "registry.example/app:1", RemoteLabels.CRI_LAYER_DIGEST, DIGEST,
        RemoteLabels.CRI_MANIFEST_DIGEST, MANIFEST,
        RemoteLabels.STARGZ_REFERENCE, "other.example/x:2", RemoteLabels.STARGZ_DIGEST, DIGEST)).orElseThrow();
    assertEquals("registry.example", l.image().registry());
    assertEquals(DIGEST, l.layer().toString());
    assertEquals(MANIFEST, l.manifest().orElseThrow().toString());
  }

  @Test
  void stargzLabels_fromCtrRemoteRpull() {
    RemoteLabels l = RemoteLabels.parse(Map.of(
        RemoteLabels.STARGZ_REFERENCE, "127.0.0.1:5000/py:esgz", RemoteLabels.STARGZ_DIGEST, DIGEST)).orElseThrow();
    assertEquals("py", l.image().repository());
    assertTrue(l.manifest().isEmpty());
  }

  @Test
  void noRemoteLabels_isAnOrdinaryPull() {
    assertTrue(RemoteLabels.parse(Map.of("containerd.io/snapshot.ref", "sha256:x")).isEmpty());
  }

  @Test
  void malformedLabels_areRefused() {
    assertThrows(IllegalArgumentException.class, () -> RemoteLabels.parse(Map.of(
        RemoteLabels.STARGZ_REFERENCE, "127.0.0.1:5000/py:esgz", RemoteLabels.STARGZ_DIGEST, "sha256:nothex")));
    assertThrows(IllegalArgumentException.class, () -> RemoteLabels.parse(Map.of(
        RemoteLabels.STARGZ_REFERENCE, "::", RemoteLabels.STARGZ_DIGEST, DIGEST)));
    assertThrows(IllegalArgumentException.class, () -> RemoteLabels.parse(Map.of(RemoteLabels.STARGZ_DIGEST, DIGEST)));
  }
}
