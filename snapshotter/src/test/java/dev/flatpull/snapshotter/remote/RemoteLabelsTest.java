package dev.flatpull.snapshotter.remote;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.oci.Descriptor;
import java.util.List;
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
  void anEstargzLayersInheritedAnnotations_describeIt_beforeTheManifestIsRead() {
    String toc = "sha256:" + "ef".repeat(32);
    RemoteLabels l = RemoteLabels.parse(Map.of(
        RemoteLabels.STARGZ_REFERENCE, "127.0.0.1:5000/py:esgz", RemoteLabels.STARGZ_DIGEST, DIGEST,
        LayerFormat.ESTARGZ_TOC_DIGEST, toc, LayerFormat.ESTARGZ_TAIL_LABEL, "1000:2051")).orElseThrow();
    Descriptor d = l.described().orElseThrow();
    assertEquals(DIGEST, d.digest().toString());
    assertEquals(2051, d.size());
    assertEquals(toc, d.annotation(LayerFormat.ESTARGZ_TOC_DIGEST).orElseThrow());
    assertEquals("1000", d.annotation(LayerFormat.ESTARGZ_TOC_OFFSET).orElseThrow());

    for (Map<String, String> hint : List.of(Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, toc),
        Map.of(LayerFormat.ESTARGZ_TAIL_LABEL, "1000:2051"),
        Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, "sha256:short", LayerFormat.ESTARGZ_TAIL_LABEL, "1000:2051"),
        Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, toc, LayerFormat.ESTARGZ_TAIL_LABEL, "3000:2051"))) {
      Map<String, String> labels = new java.util.HashMap<>(hint);
      labels.put(RemoteLabels.STARGZ_REFERENCE, "127.0.0.1:5000/py:esgz");
      labels.put(RemoteLabels.STARGZ_DIGEST, DIGEST);
      RemoteLabels partial = RemoteLabels.parse(labels).orElseThrow();
      assertTrue(partial.described().isEmpty(), "a hint, never a refusal: " + hint);
    }
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
