package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Against a real registry process: an image built from real files is converted by {@code flatpull convert} to both
 * lazy formats, and {@code flatpull cat} returns every regular file of every variant byte for byte.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ConvertAndCatIT {
  private RegistryServer registry;
  private TestImage image;
  private String esgz;
  private String zstd;

  @BeforeAll
  void setUp() throws Exception {
    registry = RegistryServer.shared();
    image = TestImage.push(registry, "it/sample", "plain");
    esgz = registry.address() + "/it/sample:esgz";
    zstd = registry.address() + "/it/sample:zstd";
    Cli.Run a = Cli.inProcess("convert", "--plain-http", "--chunk-size", "262144", image.reference.toString(), esgz);
    assertEquals(0, a.exitCode(), a.stderr());
    assertTrue(a.out().startsWith(esgz + "@sha256:"), a.out());
    // Piped, progress stays line-oriented: a line per step, no status line rewritten in place.
    assertTrue(a.stderr().contains("layer 1/") && a.stderr().contains(": fetching ")
        && a.stderr().contains(" entries, ") && a.stderr().contains("pushed " + esgz), a.stderr());
    assertTrue(!a.stderr().contains("\r"), a.stderr());
    Cli.Run b = Cli.inProcess("convert", "--plain-http", "--format", "zstd-chunked", "--chunk-size", "262144",
        image.reference.toString(), zstd);
    assertEquals(0, b.exitCode(), b.stderr());
    Cli.Run quiet = Cli.inProcess("convert", "--plain-http", "--quiet", image.reference.toString(), esgz + "-quiet");
    assertEquals(0, quiet.exitCode(), quiet.stderr());
    assertEquals("", quiet.stderr());
  }

  @AfterAll
  void tearDown() throws Exception {
    if (registry != null) {
      registry.close();
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"plain", "esgz", "zstd"})
  void cat_everyRegularFile_matchesTheOriginalBytes(String tag) {
    String ref = registry.address() + "/it/sample:" + tag;
    assertTrue(image.files.size() > 40, "a real image has many files: " + image.files.size());
    for (Map.Entry<String, byte[]> f : image.files.entrySet()) {
      Cli.Run r = Cli.inProcess("cat", "--plain-http", ref, "/" + f.getKey());
      assertEquals(0, r.exitCode(), f.getKey() + ": " + r.stderr());
      assertArrayEquals(f.getValue(), r.stdout(), f.getKey());
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"plain", "esgz", "zstd"})
  void cat_fileDeletedByTheUpperLayer_isNotFound(String tag) {
    for (String gone : image.deleted) {
      Cli.Run r = Cli.inProcess("cat", "--plain-http", registry.address() + "/it/sample:" + tag, "/" + gone);
      assertEquals(4, r.exitCode(), r.stderr());
      assertTrue(r.stderr().contains("does not exist"), r.stderr());
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"esgz", "zstd"})
  void catStats_smallFileOfAMultiMegabyteLayer_transfersFarLessThanTheLayer(String tag) throws Exception {
    assertTrue(image.lowerLayerSize > 2_000_000, "the layer is multi-megabyte: " + image.lowerLayerSize);
    Cli.Run r = Cli.launcher("cat", "--plain-http", "--stats", registry.address() + "/it/sample:" + tag, "/" + image.smallFile);
    assertEquals(0, r.exitCode(), r.stderr());
    assertArrayEquals(image.files.get(image.smallFile), r.stdout());
    Matcher m = Pattern.compile("received: (\\d+) bytes").matcher(r.stderr());
    assertTrue(m.find(), r.stderr());
    long received = Long.parseLong(m.group(1));
    assertTrue(received < image.lowerLayerSize / 20,
        "reading one small file took " + received + " bytes of a " + image.lowerLayerSize + "-byte layer");
  }

  @Test
  void catStats_plainImage_downloadsTheWholeLayerAndSaysSo() throws Exception {
    Cli.Run r = Cli.inProcess("cat", "--plain-http", "--stats", image.reference.toString(), "/" + image.smallFile);
    assertEquals(0, r.exitCode(), r.stderr());
    assertTrue(r.stderr().contains("(plain)"), r.stderr());
  }

  @Test
  void inspectJson_reportsFormatsTocsAndCounts() throws Exception {
    ObjectMapper json = new ObjectMapper();
    for (String[] t : new String[][] {{"esgz", "estargz"}, {"zstd", "zstd:chunked"}, {"plain", "plain"}}) {
      Cli.Run r = Cli.inProcess("inspect", "--plain-http", "--json", registry.address() + "/it/sample:" + t[0]);
      assertEquals(0, r.exitCode(), r.stderr());
      JsonNode layers = json.readTree(r.stdout()).get("layers");
      assertEquals(2, layers.size());
      for (JsonNode l : layers) {
        assertEquals(t[1], l.get("format").asText());
        if (!t[1].equals("plain")) {
          assertTrue(l.get("tocDigest").asText().startsWith("sha256:"));
          assertTrue(l.get("entries").asInt() > 0 && l.get("chunks").asInt() > 0, l.toString());
        }
      }
      assertTrue(layers.get(0).get("entries").asInt() > 40 || t[1].equals("plain"));
    }
  }

  @Test
  void cat_unknownImageOrPath_failWithClearErrors() {
    Cli.Run missingImage = Cli.inProcess("cat", "--plain-http", registry.address() + "/it/nothing:here", "/etc/hostname");
    assertEquals(4, missingImage.exitCode());
    assertTrue(missingImage.stderr().contains("MANIFEST_UNKNOWN") || missingImage.stderr().contains("NAME_UNKNOWN"),
        missingImage.stderr());
    Cli.Run missingFile = Cli.inProcess("cat", "--plain-http", esgz, "/no/such/file");
    assertEquals(4, missingFile.exitCode());
    Cli.Run badRef = Cli.inProcess("cat", "--plain-http", "Not A Ref", "/x");
    assertEquals(2, badRef.exitCode(), badRef.stderr());
  }
}
