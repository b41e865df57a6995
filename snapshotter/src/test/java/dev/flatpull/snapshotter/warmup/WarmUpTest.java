package dev.flatpull.snapshotter.warmup;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.RegistryNotFoundException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class WarmUpTest {
  @TempDir Path dir;

  @Test
  void tinyImage_resolvesThroughTheRealRegistryClient_andLeavesNothingBehind() throws Exception {
    WarmUp.withTinyImage(dir.resolve("warm-up"), image -> {
      ImageManifest m = image.clients().client(image.ref()).resolve(image.ref(), Platform.current()).manifest();
      assertEquals(1, m.layers().size());
      assertEquals(image.layer(), m.layers().get(0).digest());
    });
    assertFalse(Files.exists(dir.resolve("warm-up")));
  }

  /** The registry the warm-up pulls from speaks enough of the distribution API for the real client. */
  @Test
  void loopbackRegistry_servesManifestsByTag_andBlobRanges_toTheRealClient() throws Exception {
    byte[] blob = "0123456789".getBytes(StandardCharsets.UTF_8);
    byte[] config = "{}".getBytes(StandardCharsets.UTF_8);
    String manifest = """
        {"schemaVersion":2,"mediaType":"%s","config":{"mediaType":"%s","digest":"%s","size":2},
         "layers":[{"mediaType":"%s","digest":"%s","size":10}]}""".formatted(MediaTypes.OCI_MANIFEST,
        MediaTypes.OCI_CONFIG, Digest.sha256(config), MediaTypes.OCI_LAYER_GZIP, Digest.sha256(blob));
    try (LoopbackRegistry registry = LoopbackRegistry.start();
        RegistryClients clients = RegistryClients.create(FlatpullConfig.parse("t", "root = \"" + dir
            + "\"\n[registry]\nplain_http = true\nmax_attempts = 1\n"), FetchListener.NONE)) {
      registry.content().putManifest("v1", MediaTypes.OCI_MANIFEST, manifest.getBytes(StandardCharsets.UTF_8));
      registry.content().putBlob(blob);
      ImageReference ref = ImageReference.parse(registry.address() + "/a/b:v1");
      RegistryClient client = clients.client(ref);

      ImageManifest m = client.resolve(ref, Platform.current()).manifest();

      assertEquals(Digest.sha256(blob), m.layers().get(0).digest());
      assertEquals("2345", new String(client.readRange(Digest.sha256(blob), ByteRange.between(2, 6)),
          StandardCharsets.UTF_8));
      try {
        client.resolve(ImageReference.parse(registry.address() + "/a/b:absent"), Platform.current());
        throw new AssertionError("an absent tag resolved");
      } catch (RegistryNotFoundException expected) {
        assertTrue(expected.getMessage().contains("absent"), expected.getMessage());
      }
    }
  }

  /**
   * The shifted TOCs stand for real layers: written as ctr-remote writes one (Go's field order, zero owners absent,
   * tab-indented), with the offsets of a large blob, and meaning exactly what the warm-up's own TOC means.
   */
  @Test
  void shiftedToc_isInCtrRemotesForm_andParsesToTheSameEntries_atShiftedOffsets() throws Exception {
    FlatpullConfig config = FlatpullConfig.parse("t", "root = \"" + dir + "\"\n");
    WarmUp.Layer estargz = WarmUp.syntheticLayers(dir).stream()
        .filter(l -> l.descriptor().mediaType().equals(MediaTypes.OCI_LAYER_GZIP)).findFirst().orElseThrow();
    long shift = 100_000_000L;

    WarmUp.Layer shifted = WarmUp.shifted(estargz, shift);

    LayerIndex original = EstargzToc.read(estargz.descriptor(), estargz.reader(), config.limits());
    LayerIndex moved = EstargzToc.read(shifted.descriptor(), shifted.reader(), config.limits());
    List<String> expected = describe(original, 0);
    List<String> actual = describe(moved, shift);
    assertEquals(expected.size(), actual.size());
    for (int i = 0; i < expected.size(); i++) {
      assertEquals(expected.get(i), actual.get(i), "entry " + i);
    }
    // Every kind of entry a distribution's layer has: a kind the compiled parser never saw sends it back to the
    // interpreter at a node's first real TOC.
    for (EntryType type : EntryType.values()) {
      assertTrue(original.entries().stream().anyMatch(e -> e.type() == type), "the warm-up's layer has " + type);
    }
    assertTrue(original.entries().stream().anyMatch(e -> e.uid() == 0 && e.type() == EntryType.REG),
        "the warm-up has files owned by root");
    assertTrue(original.entries().stream().anyMatch(e -> !e.xattrs().isEmpty()), "the warm-up has xattrs");
    assertTrue(original.entries().stream().anyMatch(e -> e.type() == EntryType.CHAR && e.devMinor() == 0),
        "the warm-up has a device of minor number 0");
    String json = new String(WarmUp.tocJson(shifted), StandardCharsets.UTF_8);
    assertTrue(json.startsWith("{\n\t\"version\": 1,\n\t\"entries\": [\n\t\t{\n\t\t\t\"name\": "),
        json.substring(0, 80));
    assertFalse(json.contains("\"uid\": 0,"), "a zero uid is left out, as Go's omitempty does");
    assertTrue(json.contains("\"uid\": 1000,"), "a non-zero uid stays");
  }

  /** Every entry in full, its chunks' stored offsets less {@code shift}. */
  private static List<String> describe(LayerIndex index, long shift) {
    return index.entries().stream().map(e -> String.join("|", e.name(), e.type().toString(), "" + e.size(),
        "" + e.mode(), e.uid() + ":" + e.gid(), e.userName() + ":" + e.groupName(), e.modTime().toString(),
        e.linkName(), e.devMajor() + ":" + e.devMinor(), e.digest().toString(),
        e.xattrs().entrySet().stream().map(x -> x.getKey() + "=" + Arrays.toString(x.getValue()))
            .sorted().collect(Collectors.joining(",")),
        e.chunks().stream().map(c -> c.fileOffset() + "+" + c.size() + "@" + (c.stored().offset() - shift) + "+"
            + c.stored().length() + "/" + c.innerOffset() + "/" + c.digest()).collect(Collectors.joining(","))))
        .toList();
  }
}
