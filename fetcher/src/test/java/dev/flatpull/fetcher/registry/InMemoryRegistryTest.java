package dev.flatpull.fetcher.registry;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class InMemoryRegistryTest {
  private static final byte[] BLOB = "0123456789".getBytes(StandardCharsets.US_ASCII);
  private final InMemoryRegistry registry = new InMemoryRegistry();

  private InMemoryRegistry.Answer get(String path, String range) {
    return registry.answer("GET", path, null, range, null, new byte[0]);
  }

  @Test
  void ranges_closedOpenAndBeyondTheEnd_areAnsweredAsDistributionDoes() {
    Digest d = registry.putBlob(BLOB);
    String path = "/v2/a/b/blobs/" + d;

    InMemoryRegistry.Answer closed = get(path, "bytes=2-5");
    assertEquals(206, closed.status());
    assertArrayEquals("2345".getBytes(StandardCharsets.US_ASCII), closed.body());
    assertEquals("bytes 2-5/10", closed.headers().get("Content-Range"));
    assertArrayEquals("89".getBytes(StandardCharsets.US_ASCII), get(path, "bytes=8-").body());
    assertEquals("bytes 8-9/10", get(path, "bytes=8-20").headers().get("Content-Range"), "cut at the end");
    assertEquals(416, get(path, "bytes=10-12").status());
    assertArrayEquals(BLOB, get(path, null).body());
    assertEquals(404, get("/v2/a/b/blobs/" + Digest.sha256(new byte[1]), null).status());
  }

  @Test
  void aBlobCutShortWhenSent_keepsTheStoredSizeInItsContentRange() {
    InMemoryRegistry cut = new InMemoryRegistry(false, b -> java.util.Arrays.copyOf(b, 4));
    Digest d = cut.putBlob(BLOB);

    InMemoryRegistry.Answer a = cut.answer("GET", "/v2/a/blobs/" + d, null, "bytes=2-7", null, new byte[0]);

    assertEquals("bytes 2-7/10", a.headers().get("Content-Range"));
    assertArrayEquals("23".getBytes(StandardCharsets.US_ASCII), a.body());
  }

  @Test
  void anUploadWhoseBytesAreNotItsDigest_isRefused() {
    String location = registry.answer("POST", "/v2/a/blobs/uploads/", null, null, null, new byte[0]).headers()
        .get("Location");

    InMemoryRegistry.Answer wrong = registry.answer("PUT", location, Digest.sha256(new byte[1]).toString(), null,
        null, BLOB);
    InMemoryRegistry.Answer right = registry.answer("PUT", location, Digest.sha256(BLOB).toString(), null, null,
        BLOB);

    assertEquals(400, wrong.status());
    assertTrue(new String(wrong.body(), StandardCharsets.UTF_8).contains("DIGEST_INVALID"));
    assertEquals(201, right.status());
    assertArrayEquals(BLOB, get("/v2/a/blobs/" + Digest.sha256(BLOB), null).body());
  }

  @Test
  void aManifestDeletedByDigest_takesItsTags_andWithoutTheApiReferrersAre404() {
    byte[] manifest = "{\"schemaVersion\":2,\"subject\":{\"digest\":\"sha256:ab\"}}".getBytes(StandardCharsets.UTF_8);
    InMemoryRegistry.Answer put = registry.answer("PUT", "/v2/a/manifests/v1", null, null, MediaTypes.OCI_MANIFEST,
        manifest);
    String digest = put.headers().get("Docker-Content-Digest");
    assertEquals(Digest.sha256(manifest).toString(), digest);
    assertFalse(put.headers().containsKey("OCI-Subject"), "distribution 2.8 does not acknowledge a subject");
    assertEquals(MediaTypes.OCI_MANIFEST, get("/v2/a/manifests/v1", null).headers().get("Content-Type"));
    assertEquals(404, get("/v2/a/referrers/sha256:ab", null).status());

    assertEquals(202, registry.answer("DELETE", "/v2/a/manifests/" + digest, null, null, null, new byte[0]).status());

    assertEquals(404, get("/v2/a/manifests/v1", null).status());
    assertTrue(registry.manifest(digest).isEmpty());
  }

  @Test
  void withTheApi_aPushedSubjectIsAcknowledged_andListed() {
    InMemoryRegistry api = new InMemoryRegistry(true, b -> b);
    byte[] manifest = ("{\"schemaVersion\":2,\"mediaType\":\"" + MediaTypes.OCI_MANIFEST
        + "\",\"artifactType\":\"t\",\"subject\":{\"digest\":\"sha256:ab\"}}").getBytes(StandardCharsets.UTF_8);

    InMemoryRegistry.Answer put = api.answer("PUT", "/v2/a/manifests/" + Digest.sha256(manifest), null, null,
        MediaTypes.OCI_MANIFEST, manifest);
    InMemoryRegistry.Answer listed = api.answer("GET", "/v2/a/referrers/sha256:ab", null, null, null, new byte[0]);

    assertEquals("sha256:ab", put.headers().get("OCI-Subject"));
    String index = new String(listed.body(), StandardCharsets.UTF_8);
    assertTrue(index.contains(Digest.sha256(manifest).toString()) && index.contains("\"artifactType\":\"t\""), index);
  }
}
