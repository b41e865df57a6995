package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class EstargzTailTest {
  private static final Digest LAYER = Digest.sha256(new byte[] {1});
  private static final Digest TOC = Digest.sha256(new byte[] {2});

  @Test
  void label_roundTrips() {
    EstargzTail t = new EstargzTail(1000, 2051);
    assertEquals("1000:2051", t.label());
    assertEquals(Optional.of(t), EstargzTail.parse(t.label()));
  }

  @Test
  void malformedLabels_areNoHint() {
    for (String bad : new String[] {null, "", ":", "12", "12:", ":12", "a:b", "-1:10", "10:10", "20:10",
        "1:99999999999999999999", "1:2:3"}) {
      assertEquals(Optional.empty(), EstargzTail.parse(bad), String.valueOf(bad));
    }
  }

  @Test
  void describes_onlyTheManifestsDescriptorOfTheSameBlobSizeAndToc() {
    Descriptor expected = new EstargzTail(1000, 2051).descriptor(LAYER, TOC);
    Map<String, String> annotations = new HashMap<>(Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, TOC.toString()));
    Descriptor manifests = new Descriptor(MediaTypes.DOCKER_LAYER_GZIP, LAYER, 2051, annotations);
    assertTrue(EstargzTail.describes(expected, manifests), "a Docker media type is the same gzip blob");

    assertFalse(EstargzTail.describes(expected, new Descriptor(MediaTypes.OCI_LAYER_GZIP, LAYER, 2052, annotations)));
    assertFalse(EstargzTail.describes(expected,
        new Descriptor(MediaTypes.OCI_LAYER_GZIP, TOC, 2051, annotations)));
    assertFalse(EstargzTail.describes(expected, new Descriptor(MediaTypes.OCI_LAYER_GZIP, LAYER, 2051,
        Map.of(LayerFormat.ESTARGZ_TOC_DIGEST, LAYER.toString()))), "another TOC");
    assertFalse(EstargzTail.describes(expected, new Descriptor(MediaTypes.OCI_LAYER_GZIP, LAYER, 2051, Map.of())),
        "a layer the manifest gives no TOC digest is not read through one");
    assertFalse(EstargzTail.describes(expected, new Descriptor(MediaTypes.OCI_LAYER_ZSTD, LAYER, 2051, annotations)),
        "nor one of another compression");
  }
}
