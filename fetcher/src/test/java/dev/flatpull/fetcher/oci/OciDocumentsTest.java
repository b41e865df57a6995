package dev.flatpull.fetcher.oci;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Digest;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class OciDocumentsTest {
  private static final String D1 = Digest.sha256(new byte[] {1}).toString();
  private static final String D2 = Digest.sha256(new byte[] {2}).toString();

  private static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static String desc(String mt, String d, long size) {
    return "{\"mediaType\":\"" + mt + "\",\"digest\":\"" + d + "\",\"size\":" + size + "}";
  }

  @Test
  void parse_ociManifest_roundTripsThroughTheWriter() throws Exception {
    byte[] raw = OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST,
        new Descriptor(MediaTypes.OCI_CONFIG, Digest.parse(D1), 10, Map.of()),
        List.of(new Descriptor(MediaTypes.OCI_LAYER_GZIP, Digest.parse(D2), 20, Map.of("k", "v"))), Map.of());
    ImageManifest m = assertInstanceOf(ImageManifest.class, OciDocuments.parse(raw, null));
    assertEquals(Digest.sha256(raw), m.digest());
    assertEquals("v", m.layers().get(0).annotations().get("k"));
    assertEquals(20, m.layers().get(0).size());
  }

  @Test
  void parse_dockerManifestWithoutMediaTypeField_usesContentType() throws Exception {
    String json = "{\"schemaVersion\":2,\"config\":" + desc(MediaTypes.DOCKER_CONFIG, D1, 1) + ",\"layers\":[]}";
    OciDocument d = OciDocuments.parse(b(json), MediaTypes.DOCKER_MANIFEST + "; charset=utf-8");
    assertEquals(MediaTypes.DOCKER_MANIFEST, d.mediaType());
  }

  @Test
  void parse_index_selectsThePlatform() throws Exception {
    String json = "{\"schemaVersion\":2,\"mediaType\":\"" + MediaTypes.OCI_INDEX + "\",\"manifests\":["
        + "{\"mediaType\":\"" + MediaTypes.OCI_MANIFEST + "\",\"digest\":\"" + D1 + "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}},"
        + "{\"mediaType\":\"" + MediaTypes.OCI_MANIFEST + "\",\"digest\":\"" + D2 + "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";
    ImageIndex i = assertInstanceOf(ImageIndex.class, OciDocuments.parse(b(json), null));
    assertEquals(D2, i.select(Platform.parse("linux/amd64")).orElseThrow().digest().toString());
    assertEquals(D1, i.select(Platform.parse("linux/arm64/v8")).orElseThrow().digest().toString());
    assertEquals(Optional.empty(), i.select(Platform.parse("linux/s390x")));
  }

  @Test
  void parse_malformedJson_failsNamingTheDigest() {
    ManifestFormatException e = assertThrows(ManifestFormatException.class, () -> OciDocuments.parse(b("{\"schemaVersion\":"), null));
    assertTrue(e.getMessage().contains("not valid JSON") && e.getMessage().contains("sha256:"), e.getMessage());
  }

  @Test
  void parse_unknownMediaType_failsWithUnsupportedMediaType() {
    String json = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.example.thing+json\",\"layers\":[]}";
    UnsupportedMediaTypeException e = assertThrows(UnsupportedMediaTypeException.class, () -> OciDocuments.parse(b(json), null));
    assertEquals("application/vnd.example.thing+json", e.mediaType());
  }

  @Test
  void parse_schemaVersion1_isRefused() {
    assertThrows(ManifestFormatException.class, () -> OciDocuments.parse(b("{\"schemaVersion\":1}"), null));
  }

  @Test
  void parse_badDescriptors_areRefusedWithTheirPlace() {
    String noConfig = "{\"schemaVersion\":2,\"mediaType\":\"" + MediaTypes.OCI_MANIFEST + "\",\"layers\":[]}";
    assertTrue(assertThrows(ManifestFormatException.class, () -> OciDocuments.parse(b(noConfig), null)).getMessage().contains("config"));
    String badDigest = "{\"schemaVersion\":2,\"mediaType\":\"" + MediaTypes.OCI_MANIFEST + "\",\"config\":"
        + desc(MediaTypes.OCI_CONFIG, D1, 1) + ",\"layers\":[" + desc(MediaTypes.OCI_LAYER_GZIP, "sha256:xyz", 1) + "]}";
    assertTrue(assertThrows(ManifestFormatException.class, () -> OciDocuments.parse(b(badDigest), null)).getMessage().contains("layers[0]"));
    String negative = "{\"schemaVersion\":2,\"mediaType\":\"" + MediaTypes.OCI_MANIFEST + "\",\"config\":"
        + desc(MediaTypes.OCI_CONFIG, D1, -1) + ",\"layers\":[]}";
    assertTrue(assertThrows(ManifestFormatException.class, () -> OciDocuments.parse(b(negative), null)).getMessage().contains("size"));
  }

  @Test
  void layerCompression_unknownLayerType_isRefused() {
    assertThrows(UnsupportedMediaTypeException.class, () -> MediaTypes.layerCompression("application/x-squashfs"));
  }
}
