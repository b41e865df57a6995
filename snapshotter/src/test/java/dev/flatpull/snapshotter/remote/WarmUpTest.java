package dev.flatpull.snapshotter.remote;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
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
      registry.manifest("a/b", "v1", MediaTypes.OCI_MANIFEST, manifest.getBytes(StandardCharsets.UTF_8));
      registry.blob("a/b", Digest.sha256(blob), blob);
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
}
