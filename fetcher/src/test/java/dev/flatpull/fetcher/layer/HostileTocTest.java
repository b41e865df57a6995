package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.io.IOException;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** Malformed or hostile TOCs, footers and annotations are refused with a clear error, never half-read. */
class HostileTocTest {
  static List<HostileLayers.Blob> refused() {
    return HostileLayers.refused();
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("refused")
  void read_hostileLayer_isRefusedWithAClearError(HostileLayers.Blob b) {
    BlobReader r = range -> Arrays.copyOfRange(b.bytes(), (int) Math.min(range.offset(), b.bytes().length),
        (int) Math.min(range.end(), b.bytes().length));
    IOException e = assertThrows(IOException.class, () -> {
      if (LayerFormat.of(b.descriptor()) == LayerFormat.ZSTD_CHUNKED) {
        ZstdChunkedToc.read(b.descriptor(), r, HostileLayers.LIMITS);
      } else {
        EstargzToc.read(b.descriptor(), r, HostileLayers.LIMITS);
      }
    });
    assertTrue(e.getMessage().contains(b.refusal()),
        "message '" + e.getMessage() + "' should contain '" + b.refusal() + "'");
    if (b.refusal().equals("limit")) {
      assertTrue(e instanceof SizeLimitExceededException, e.toString());
    }
    if (b.refusal().equals("digest")) {
      assertTrue(e instanceof DigestMismatchException, e.toString());
    }
  }

  @Test
  void read_theValidLayerTheCasesAreMadeFrom_isAccepted() throws IOException {
    HostileLayers.Blob b = HostileLayers.estargz("valid", HostileLayers.toc(), null);
    assertEquals(0, EstargzToc.read(b.descriptor(), range -> Arrays.copyOfRange(b.bytes(), (int) range.offset(),
        (int) range.end()), HostileLayers.LIMITS).entries().size());
  }

  @Test
  void of_gzipLayerWithoutTocAnnotation_isReadAsPlainNotTrusted() throws Exception {
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER_GZIP, Digest.parse(HostileLayers.DIGEST), 10, Map.of());
    org.junit.jupiter.api.Assertions.assertEquals(LayerFormat.PLAIN, LayerFormat.of(d));
  }
}
