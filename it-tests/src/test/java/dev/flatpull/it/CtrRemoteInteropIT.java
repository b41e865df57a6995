package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * Interoperability with stargz-snapshotter's tooling, through a real containerd: images converted by
 * {@code ctr-remote image convert} are read by flatpull, and images converted by flatpull are pulled and unpacked by
 * containerd (which checks every layer's diffID) and parsed by {@code ctr-remote image get-toc-digest} (stargz's own
 * eStargz reader), which must compute the TOC digest flatpull annotated.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class CtrRemoteInteropIT {
  private RegistryServer registry;
  private ContainerdServer containerd;
  private TestImage image;
  private final ObjectMapper json = new ObjectMapper();

  @BeforeAll
  void setUp() throws Exception {
    registry = RegistryServer.shared();
    containerd = ContainerdServer.start();
    image = TestImage.push(registry, "it/interop", "plain");
    containerd.ctrOk("image", "pull", "--plain-http", image.reference.toString());
  }

  @AfterAll
  void tearDown() throws Exception {
    if (containerd != null) {
      containerd.close();
    }
    if (registry != null) {
      registry.close();
    }
  }

  private void assertEveryFileReads(String ref) {
    for (Map.Entry<String, byte[]> f : image.files.entrySet()) {
      Cli.Run r = Cli.inProcess("cat", "--plain-http", ref, "/" + f.getKey());
      assertEquals(0, r.exitCode(), ref + " " + f.getKey() + ": " + r.stderr());
      assertArrayEquals(f.getValue(), r.stdout(), ref + " " + f.getKey());
    }
  }

  private JsonNode inspect(String ref) throws Exception {
    Cli.Run r = Cli.inProcess("inspect", "--plain-http", "--json", ref);
    assertEquals(0, r.exitCode(), r.stderr());
    return json.readTree(r.stdout());
  }

  /** Converts the test image with {@code ctr-remote image convert FLAG --oci}, pushes it, and returns its reference. */
  private String convertWithCtrRemote(String flag, String tag) throws Exception {
    String ref = registry.address() + "/it/interop:" + tag;
    containerd.ctrOk("image", "convert", flag, "--oci", image.reference.toString(), ref);
    containerd.ctrOk("image", "push", "--plain-http", ref);
    return ref;
  }

  @Test
  void ctrRemoteEstargz_isReadLazilyByFlatpull() throws Exception {
    String ref = convertWithCtrRemote("--estargz", "ctr-esgz");
    for (JsonNode l : inspect(ref).get("layers")) {
      assertEquals("estargz", l.get("format").asText());
    }
    assertEveryFileReads(ref);
  }

  @Test
  void ctrRemoteZstdChunked_isReadLazilyByFlatpull() throws Exception {
    String ref = convertWithCtrRemote("--zstdchunked", "ctr-zstd");
    for (JsonNode l : inspect(ref).get("layers")) {
      assertEquals("zstd:chunked", l.get("format").asText());
    }
    assertEveryFileReads(ref);
  }

  @Test
  void flatpullEstargz_isUnpackedByContainerdAndParsedByStargzTooling() throws Exception {
    String ref = registry.address() + "/it/interop:flatpull-esgz";
    Cli.Run c = Cli.inProcess("convert", "--plain-http", "--format", "estargz", image.reference.toString(), ref);
    assertEquals(0, c.exitCode(), c.stderr());
    // containerd unpacks every layer and refuses a diffID that does not match the config.
    containerd.ctrOk("image", "pull", "--plain-http", ref);
    containerd.ctrOk("image", "check");
    for (JsonNode l : inspect(ref).get("layers")) {
      String toc = containerd.ctrOk("image", "get-toc-digest", l.get("digest").asText()).stdout().trim();
      assertEquals(l.get("tocDigest").asText(), toc, "stargz's reader computes the TOC digest flatpull annotated");
    }
  }

  @Test
  void flatpullZstdChunked_isUnpackedByContainerd() throws Exception {
    String ref = registry.address() + "/it/interop:flatpull-zstd";
    Cli.Run c = Cli.inProcess("convert", "--plain-http", "--format", "zstd-chunked", image.reference.toString(), ref);
    assertEquals(0, c.exitCode(), c.stderr());
    Processes.Result pull = containerd.ctrOk("image", "pull", "--plain-http", ref);
    assertTrue(pull.stdout().contains("done"), pull.stdout());
    assertEveryFileReads(ref);
  }
}
