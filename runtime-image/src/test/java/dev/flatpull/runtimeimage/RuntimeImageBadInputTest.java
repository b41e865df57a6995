package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.github.luben.zstd.Zstd;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Every way a runtime image (or a trace to build one) can be wrong is refused with where and why. */
class RuntimeImageBadInputTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  @TempDir Path dir;
  TestImage img;
  RuntimeImageBuilder.Built image;
  RuntimeImageBuilder.Built pages;

  @BeforeEach
  void build() throws Exception {
    img = new RuntimeImageBuilderTest().imageIn(dir, LayerFormat.ESTARGZ);
    image = RuntimeImageBuilderTest.builder(Verification.IMAGE)
        .build(RuntimeImageBuilderTest.trace(img), img.manifest, img.source());
    pages = RuntimeImageBuilderTest.builder(Verification.RUNTIME_IMAGE)
        .build(RuntimeImageBuilderTest.trace(img), img.manifest, img.source());
  }

  /** The blob with its index JSON changed by {@code edit}. */
  static byte[] withIndex(byte[] blob, Consumer<ObjectNode> edit) throws Exception {
    int length = RuntimeImageFormat.indexLength(blob);
    byte[] compressed = Arrays.copyOfRange(blob, 24, 24 + length);
    ObjectNode root = (ObjectNode) JSON.readTree(Zstd.decompress(compressed, (int) Zstd.getFrameContentSize(compressed)));
    edit.accept(root);
    byte[] index = Zstd.compress(JSON.writeValueAsBytes(root), 3);
    ByteBuffer out = ByteBuffer.allocate(24 + index.length + blob.length - 24 - length).order(ByteOrder.LITTLE_ENDIAN);
    out.put(blob, 0, 20).putInt(index.length).put(index).put(blob, 24 + length, blob.length - 24 - length);
    return out.array();
  }

  /** A manifest of the same layers with another config: another image to the runtime image. */
  ImageManifest sameLayersOtherManifest(byte config) throws Exception {
    Descriptor c = new Descriptor(MediaTypes.OCI_CONFIG, Digest.sha256(new byte[] {config}), 1, Map.of());
    return (ImageManifest) OciDocuments.parse(
        OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST, c, img.descriptors, Map.of()), null);
  }

  static String formatError(byte[] blob) {
    return assertThrows(RuntimeImageFormatException.class, () -> RuntimeImageFormat.read(blob)).getMessage();
  }

  String mismatch(byte[] blob, ImageManifest manifest) throws Exception {
    RuntimeImageIndex index = RuntimeImageFormat.read(blob).index();
    return assertThrows(RuntimeImageMismatchException.class,
        () -> ImageBinding.bind(index, manifest, img.indexes())).getMessage();
  }

  static ArrayNode extent(ObjectNode root, int layer, int i) {
    return (ArrayNode) root.withArray("layers").get(layer).get("extents").get(i);
  }

  @Test
  void notARuntimeImage_isRefusedAtByteZero() {
    String m = formatError("{\"schemaVersion\":2} and some more bytes to fill".getBytes());
    assertTrue(m.startsWith("byte 0: not a flatpull runtime image"), m);
  }

  @Test
  void truncated_isRefusedWithTheOffsetAndFrame() {
    byte[] cut = Arrays.copyOf(image.blob(), image.blob().length - 100);
    String m = formatError(cut);
    assertTrue(m.contains("byte " + cut.length + ": truncated inside frame"), m);
    String inIndex = formatError(Arrays.copyOf(image.blob(), 40));
    assertTrue(inIndex.contains("byte 40: truncated inside the index"), inIndex);
    assertTrue(formatError(Arrays.copyOf(image.blob(), 10)).contains("truncated inside the 24-byte header"));
    byte[] longer = Arrays.copyOf(image.blob(), image.blob().length + 3);
    assertTrue(formatError(longer).contains("3 bytes after the last frame"));
  }

  @Test
  void aNewerVersion_isRefused_inTheHeaderAndInTheIndex() throws Exception {
    byte[] b = image.blob().clone();
    b[16] = 2;
    assertTrue(formatError(b).contains("byte 16: runtime-image format version 2 is not supported"), formatError(b));
    String m = formatError(withIndex(image.blob(), r -> r.put("version", 9)));
    assertTrue(m.contains("index.version: 9 is not supported"), m);
  }

  @Test
  void anExtentsDigestThatIsNoDigest_isRefusedNamingTheField() throws Exception {
    for (String bad : new String[] {"sha256:xyz", "md5:" + "0".repeat(32), "no digest"}) {
      String m = formatError(withIndex(image.blob(), r -> extent(r, 0, 0).set(5,
          JSON.getNodeFactory().textNode(bad))));
      assertTrue(m.contains("index.layers[0].extents[0]: ") && m.contains("digest"), bad + ": " + m);
    }
  }

  @Test
  void anIndexOutOfRange_isRefusedNamingTheField() throws Exception {
    String frame = formatError(withIndex(image.blob(), r -> extent(r, 0, 1).set(3, JSON.getNodeFactory().numberNode(999))));
    assertTrue(frame.contains("index.layers[0].extents[1]: frame 999 of"), frame);
    String file = formatError(withIndex(image.blob(), r -> extent(r, 0, 0).set(0, JSON.getNodeFactory().numberNode(50))));
    assertTrue(file.contains("index.layers[0].extents[0]: file 50 of"), file);
    String beyond = formatError(withIndex(image.blob(), r -> extent(r, 0, 0).set(4,
        JSON.getNodeFactory().numberNode(10_000_000))));
    assertTrue(beyond.contains("index.layers[0].extents[0]: bytes 10000000.."), beyond);
    String gap = formatError(withIndex(image.blob(), r -> ((ArrayNode) r.withArray("frames").get(1))
        .set(1, JSON.getNodeFactory().numberNode(5))));
    assertTrue(gap.contains("index.frames[1]: starts at 5"), gap);
    String layer = formatError(withIndex(image.blob(), r -> ((ArrayNode) r.withArray("frames").get(0))
        .set(0, JSON.getNodeFactory().numberNode(7))));
    assertTrue(layer.contains("index.frames[0]: layer 7 of 2"), layer);
    String notJson = formatError(withIndex(image.blob(), r -> r.remove("layers")));
    assertTrue(notJson.contains("index.layers: missing or not an array"), notJson);
  }

  @Test
  void overlappingExtents_areRefused() throws Exception {
    String m = formatError(withIndex(image.blob(), r -> {
      ArrayNode e = extent(r, 0, 1).deepCopy();
      e.set(1, JSON.getNodeFactory().numberNode(e.get(1).asLong() + 1));
      ((ArrayNode) r.withArray("layers").get(0).get("extents")).add(e);
    }));
    assertTrue(m.contains("index.layers[0]: extents [") && m.contains("overlap"), m);
  }

  @Test
  void inPageMode_anExtentThatIsNotOnePage_isRefused() throws Exception {
    String m = formatError(withIndex(pages.blob(), r -> extent(r, 0, 0).set(1, JSON.getNodeFactory().numberNode(100))));
    assertTrue(m.contains("in page mode an extent is one page (offset 100"), m);
  }

  @Test
  void inPageMode_aPartOfAPage_isRefusedByTheImage() throws Exception {
    // Aligned and shorter than a page, so the format takes it; /usr/bin/app has a whole page there.
    RuntimeImageIndex index = pages.index();
    int app = index.layers().get(0).files().indexOf("/usr/bin/app");
    int j = indexOfExtent(index.layers().get(0), app);
    byte[] b = withIndex(pages.blob(), r -> extent(r, 0, j).set(2, JSON.getNodeFactory().numberNode(100)));
    String m = mismatch(b, img.manifest);
    assertTrue(m.contains("index.layers[0].extents[" + j + "]: page at ") && m.contains(" of /usr/bin/app holds 100"
        + " bytes, the file has 4096 there"), m);
  }

  @Test
  void inImageMode_aChunksOffsetAndDigestWithAnotherLength_isRefused() throws Exception {
    // The first bytes of a chunk under the chunk's own digest: its bytes would fail verification, but the image says
    // at once that this is no chunk of it.
    RuntimeImageIndex index = image.index();
    int app = index.layers().get(0).files().indexOf("/usr/bin/app");
    int j = indexOfExtent(index.layers().get(0), app);
    byte[] b = withIndex(image.blob(), r -> extent(r, 0, j).set(2, JSON.getNodeFactory().numberNode(4096)));
    String m = mismatch(b, img.manifest);
    assertTrue(m.contains("index.layers[0].extents[" + j + "]: [") && m.contains("is not a chunk of layer"), m);
  }

  @Test
  void anEditedServiceKey_isRefused() throws Exception {
    String m = formatError(withIndex(image.blob(), r -> r.with("service").put("key", "sha256:" + "0".repeat(64))));
    assertTrue(m.contains("service.key does not match"), m);
  }

  @Test
  void aSubjectThatIsAnotherManifest_isRefused() throws Exception {
    ImageManifest other = sameLayersOtherManifest((byte) 2);
    String m = mismatch(image.blob(), other);
    assertTrue(m.contains("index.service.manifestDigest: built for manifest " + img.manifest.digest()), m);
  }

  @Test
  void aLayerTheImageDoesNotHave_isRefused() throws Exception {
    ImageManifest baseOnly = (ImageManifest) OciDocuments.parse(OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST,
        img.manifest.config(), img.descriptors.subList(0, 1), Map.of()), null);
    byte[] b = withIndex(image.blob(), r -> r.with("service").put("manifestDigest", baseOnly.digest().toString()));
    // The key covers the manifest digest: recompute it as a builder of such an image would have.
    byte[] rekeyed = withIndex(b, r -> r.with("service").put("key", serviceKey(r)));
    String m = mismatch(rekeyed, baseOnly);
    assertTrue(m.contains("index.layers[1].digest: layer " + img.descriptors.get(1).digest() + " is not in image"), m);
  }

  private static String serviceKey(ObjectNode r) {
    ObjectNode s = r.with("service");
    List<String> cmd = new java.util.ArrayList<>();
    s.withArray("command").forEach(n -> cmd.add(n.asText()));
    List<String> probes = new java.util.ArrayList<>();
    s.withArray("probes").forEach(n -> probes.add(n.asText()));
    return new dev.flatpull.trace.ServiceVersion(s.get("image").asText(), s.get("manifestDigest").asText(),
        s.get("platform").asText(), cmd, List.of(), s.get("workingDirectory").asText(), probes).key();
  }

  @Test
  void aFileNotInTheImage_isRefused() throws Exception {
    byte[] b = withIndex(image.blob(), r -> ((ArrayNode) r.withArray("layers").get(0).get("files")).set(0,
        JSON.getNodeFactory().textNode("/usr/bin/not-there")));
    String m = mismatch(b, img.manifest);
    assertTrue(m.contains("index.layers[0].extents[0]: /usr/bin/not-there is not a regular file of layer"), m);
  }

  @Test
  void aDirectoryNamedAsAFile_isRefused_asNotARegularFile() throws Exception {
    // A directory is in the layer's index but holds no content: refused for what it is, before any size check.
    String file = image.index().layers().get(0).files().get(0);
    String parent = file.substring(0, file.lastIndexOf('/'));
    assertTrue(img.indexes().get(img.descriptors.get(0).digest()).entry(parent).isPresent(), parent);
    byte[] b = withIndex(image.blob(), r -> ((ArrayNode) r.withArray("layers").get(0).get("files")).set(0,
        JSON.getNodeFactory().textNode(parent)));
    String m = mismatch(b, img.manifest);
    assertTrue(m.contains("index.layers[0].extents[0]: " + parent + " is not a regular file of layer"), m);
  }

  @Test
  void contentBeyondTheFilesEnd_isRefused() throws Exception {
    // Point the tiny config file's extent at offset 4096: within a valid frame, beyond the 12-byte file.
    RuntimeImageIndex index = image.index();
    int cfg = index.layers().get(0).files().indexOf("/etc/config");
    int j = indexOfExtent(index.layers().get(0), cfg);
    byte[] b = withIndex(image.blob(), r -> extent(r, 0, j).set(1, JSON.getNodeFactory().numberNode(4096)));
    String m = mismatch(b, img.manifest);
    assertTrue(m.contains("index.layers[0].extents[" + j + "]: bytes [4096, ") && m.contains("lie beyond its end (12"),
        m);
  }

  @Test
  void inImageMode_anExtentThatIsNotAChunkOfTheLayer_isRefused() throws Exception {
    // The same bytes, claimed for another file: still not a chunk of that file in the TOC.
    RuntimeImageIndex index = image.index();
    int app = index.layers().get(0).files().indexOf("/usr/bin/app");
    int cfg = index.layers().get(0).files().indexOf("/etc/config");
    int j = indexOfExtent(index.layers().get(0), cfg);
    byte[] b = withIndex(image.blob(), r -> {
      extent(r, 0, j).set(0, JSON.getNodeFactory().numberNode(app));
      extent(r, 0, j).set(1, JSON.getNodeFactory().numberNode(12 * 16384));
    });
    String m = mismatch(b, img.manifest);
    assertTrue(m.contains("index.layers[0].extents[" + j + "]: [196608, 196620) of /usr/bin/app") && m.contains(
        "is not a chunk of layer"), m);
  }

  private static int indexOfExtent(LayerExtents l, int file) {
    for (int i = 0; i < l.extents().size(); i++) {
      if (l.extents().get(i).file() == file) {
        return i;
      }
    }
    throw new AssertionError("no extent of file " + file);
  }

  @Test
  void inPageMode_aPageWhoseDigestDoesNotMatch_isRejectedAlone_theRestIsServed() throws Exception {
    String fake = Digest.sha256(new byte[] {9}).toString();
    byte[] b = withIndex(pages.blob(), r -> extent(r, 0, 0).set(5, JSON.getNodeFactory().textNode(fake)));
    RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(b);
    ImageBinding binding = ImageBinding.bind(layout.index(), img.manifest, img.indexes());
    RuntimeImageDecoder.Result r = RuntimeImageDecoder.decode(layout, b, binding, (l, e, c) ->
        assertFalse(l == 0 && e == 0, "the page with the wrong digest was served"));
    assertEquals(1, r.rejected().size(), r.rejected().toString());
    assertTrue(r.rejected().get(0).reason().contains(fake), r.rejected().toString());
    assertEquals(layout.index().extentCount() - 1, r.accepted());
  }

  @Test
  void aTraceNamingAFileTheImageDoesNotHave_isRefusedAtBuild() {
    var trace = img.trace(List.of(List.<Object[]>of(new Object[] {"/usr/bin/missing", 0, 1})));
    String m = assertThrows(RuntimeImageMismatchException.class,
        () -> RuntimeImageBuilderTest.builder(Verification.IMAGE).build(trace, img.manifest, img.source())).getMessage();
    assertTrue(m.contains("file /usr/bin/missing is not a regular file of the layer"), m);
    var beyond = img.trace(List.of(List.<Object[]>of(new Object[] {"/etc/config", 3, 1})));
    String b = assertThrows(RuntimeImageMismatchException.class,
        () -> RuntimeImageBuilderTest.builder(Verification.IMAGE).build(beyond, img.manifest, img.source())).getMessage();
    assertTrue(b.contains("pages 3..3 of /etc/config lie beyond its end (12 bytes)"), b);
  }

  @Test
  void aTraceOfAnotherImage_isRefusedAtBuild() throws Exception {
    ImageManifest other = sameLayersOtherManifest((byte) 3);
    String m = assertThrows(RuntimeImageMismatchException.class, () -> RuntimeImageBuilderTest.builder(
        Verification.IMAGE).build(RuntimeImageBuilderTest.trace(img), other, img.source())).getMessage();
    assertTrue(m.contains("the trace was recorded on manifest " + img.manifest.digest()), m);
  }

  /**
   * Seeded and bounded: flipping bytes anywhere in a valid runtime image (header, index or frames) never makes a
   * wrong byte accepted. Each mutant is either refused whole (format, binding) or decoded with every accepted extent
   * equal to the image's own bytes.
   */
  @Test
  void flippedBytes_neverYieldAnAcceptedPageWithWrongContent() throws Exception {
    Random random = new Random(20261201);
    var indexes = img.indexes();
    int refused = 0;
    int decoded = 0;
    long acceptedExtents = 0;
    long rejectedExtents = 0;
    for (RuntimeImageBuilder.Built built : List.of(image, pages)) {
      for (int round = 0; round < 150; round++) {
        byte[] b = built.blob().clone();
        int flips = 1 + random.nextInt(4);
        // Most flips land in the frames, where a decoder without verification would pass them on.
        for (int f = 0; f < flips; f++) {
          int at = random.nextInt(4) == 0 ? random.nextInt(b.length) : b.length - 1 - random.nextInt(b.length / 2);
          b[at] ^= (byte) (1 << random.nextInt(8));
        }
        RuntimeImageFormat.Layout layout;
        ImageBinding binding;
        try {
          layout = RuntimeImageFormat.read(b);
          binding = ImageBinding.bind(layout.index(), img.manifest, indexes);
        } catch (RuntimeImageFormatException | RuntimeImageMismatchException e) {
          refused++;
          continue;
        }
        decoded++;
        RuntimeImageDecoder.Result r = RuntimeImageDecoder.decode(layout, b, binding, (l, e, content) -> {
          LayerExtents layer = layout.index().layers().get(l);
          Extent x = layer.extents().get(e);
          byte[] truth = img.content(layer.digest(), layer.files().get(x.file()));
          assertArrayEquals(Arrays.copyOfRange(truth, (int) x.fileOffset(), (int) x.fileEnd()), content.bytes());
        });
        acceptedExtents += r.accepted();
        rejectedExtents += r.rejected().size();
      }
    }
    System.out.printf("fuzz: %d mutants refused whole, %d decoded: %d extents accepted (all correct), %d rejected%n",
        refused, decoded, acceptedExtents, rejectedExtents);
    assertTrue(rejectedExtents > 0 && acceptedExtents > 0, "the mutants exercised both outcomes");
  }
}
