package dev.flatpull.fetcher.registry;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.config.RegistrySettings;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.reference.ImageReference;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import mockwebserver3.MockResponse;
import okhttp3.tls.HandshakeCertificates;
import okhttp3.tls.HeldCertificate;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Registry TLS and redirects as users configure them, against real TLS servers the test starts (a private CA and
 * client certificates made by okhttp-tls): hosts.toml's {@code ca} and {@code client} are honoured, an https registry
 * cannot send credentials to a plain-http token realm or redirect to plain http, and configured headers stay with
 * their host.
 */
class RegistryTlsTest {
  private static final byte[] BLOB = "0123456789abcdefghijklmnopqrstuvwxyz".getBytes(StandardCharsets.US_ASCII);
  private static final Digest DIGEST = Digest.sha256(BLOB);

  @TempDir Path hosts;
  private final HeldCertificate root = new HeldCertificate.Builder().certificateAuthority(0).build();
  private final HeldCertificate clientCertificate = new HeldCertificate.Builder().signedBy(root).build();
  private FakeRegistry tls;
  private FakeRegistry plain;
  private RegistryClients clients;

  @BeforeEach
  void start() throws IOException {
    HeldCertificate serverCertificate = new HeldCertificate.Builder().signedBy(root)
        .addSubjectAlternativeName("localhost").addSubjectAlternativeName("127.0.0.1").build();
    HandshakeCertificates server = new HandshakeCertificates.Builder().heldCertificate(serverCertificate)
        .addTrustedCertificate(root.certificate()).build();
    tls = new FakeRegistry(false);
    tls.server.useHttps(server.sslSocketFactory());
    tls.server.requireClientAuth();
    tls.start();
    plain = new FakeRegistry(false).start();
  }

  @AfterEach
  void stop() {
    if (clients != null) {
      clients.close();
    }
    tls.close();
    plain.close();
  }

  private String host(FakeRegistry s) {
    return s.address();
  }

  /** A client for {@code server}'s host with this hosts.toml text (paths relative to the host's directory). */
  private RegistryClient client(FakeRegistry server, String hostsToml, boolean plainHttp) throws IOException {
    Path dir = Files.createDirectories(hosts.resolve(host(server)));
    Files.writeString(dir.resolve("ca.pem"), root.certificatePem());
    Files.writeString(dir.resolve("client.pem"), clientCertificate.certificatePem());
    Files.writeString(dir.resolve("client.key"), clientCertificate.privateKeyPkcs8Pem());
    Files.writeString(dir.resolve("hosts.toml"), hostsToml);
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(new RegistrySettings(Optional.of(hosts),
        Optional.empty(), plainHttp, 4, Duration.ofSeconds(2), Duration.ofSeconds(5), 1, Duration.ofMillis(1),
        Duration.ofMillis(5), 0));
    clients = new RegistryClients(config, RegistryCredentials.NONE, new FetchStatistics(), d -> { },
        () -> Instant.parse("2026-01-01T00:00:00Z"));
    return clients.client(ImageReference.parse(host(server) + "/team/app:v1"));
  }

  private static MockResponse partial() {
    return new MockResponse.Builder().code(206).setHeader("Content-Range", "bytes 0-3/" + BLOB.length)
        .body(new okio.Buffer().write(BLOB, 0, 4)).build();
  }

  private String server() {
    return "server = \"https://" + host(tls) + "\"\n";
  }

  @Test
  void aPrivateCaAndAClientCertificate_fromHostsToml_reachTheRegistry() throws Exception {
    RegistryClient c = client(tls, server() + "ca = \"ca.pem\"\nclient = [[\"client.pem\", \"client.key\"]]\n", false);
    tls.enqueue(partial());
    assertArrayEquals("0123".getBytes(StandardCharsets.US_ASCII), c.readRange(DIGEST, new ByteRange(0, 4)));
    assertEquals(1, tls.server.getRequestCount());
  }

  @Test
  void withoutTheClientCertificate_orWithoutTheCa_theRegistryIsNotReached() throws Exception {
    RegistryClient noClient = client(tls, server() + "ca = \"ca.pem\"\n", false);
    assertThrows(IOException.class, () -> noClient.readRange(DIGEST, new ByteRange(0, 4)));
    clients.close();
    RegistryClient noCa = client(tls, server() + "client = [[\"client.pem\", \"client.key\"]]\n", false);
    IOException x = assertThrows(IOException.class, () -> noCa.readRange(DIGEST, new ByteRange(0, 4)));
    assertEquals(0, tls.server.getRequestCount(), "no request got through: " + x);
  }

  @Test
  void aCaFileThatIsNotThere_isAnErrorNamingTheKey() throws Exception {
    RegistryClient c = client(tls, server() + "ca = \"missing.pem\"\n", false);
    IOException x = assertThrows(IOException.class, () -> c.readRange(DIGEST, new ByteRange(0, 4)));
    assertTrue(String.valueOf(x.getMessage()).contains("ca") && x.getMessage().contains("missing.pem"), x.getMessage());
  }

  @Test
  void aTokenRealmOnPlainHttp_forAnHttpsRegistry_isRefused_andGetsNoRequest() throws Exception {
    RegistryClient c = client(tls, server() + "ca = \"ca.pem\"\nclient = [[\"client.pem\", \"client.key\"]]\n", false);
    tls.enqueue(new MockResponse.Builder().code(401).setHeader("WWW-Authenticate",
        "Bearer realm=\"http://" + host(plain) + "/token\",service=\"s\"").build());
    RegistryAuthenticationException x = assertThrows(RegistryAuthenticationException.class,
        () -> c.readRange(DIGEST, new ByteRange(0, 4)));
    assertTrue(x.getMessage().contains("plain http"), x.getMessage());
    assertEquals(0, plain.server.getRequestCount());
  }

  @Test
  void aRedirectFromHttpsToPlainHttp_isRefused() throws Exception {
    RegistryClient c = client(tls, server() + "ca = \"ca.pem\"\nclient = [[\"client.pem\", \"client.key\"]]\n", false);
    tls.enqueue(new MockResponse.Builder().code(307)
        .setHeader("Location", "http://" + host(plain) + "/blob").build());
    IOException x = assertThrows(IOException.class, () -> c.readRange(DIGEST, new ByteRange(0, 4)));
    assertTrue(String.valueOf(x.getMessage()).contains("redirect") || String.valueOf(x.getCause()).contains("redirect"),
        String.valueOf(x));
    assertEquals(0, plain.server.getRequestCount(), "nothing went to the plain-http host");
  }

  @Test
  void aConfiguredHeader_isNotSentToARedirectsOtherHost() throws Exception {
    try (FakeRegistry storage = new FakeRegistry(false).start()) {
      RegistryClient c = client(plain, "server = \"http://" + host(plain) + "\"\n[header]\n  x-registry-key = \"k\"\n",
          true);
      plain.enqueue(new MockResponse.Builder().code(307)
          .setHeader("Location", "http://127.0.0.1:" + storage.server.getPort() + "/blob").build());
      storage.enqueue(partial());
      assertArrayEquals("0123".getBytes(StandardCharsets.US_ASCII), c.readRange(DIGEST, new ByteRange(0, 4)));
      assertEquals("k", plain.server.takeRequest().getHeaders().get("x-registry-key"));
      assertNull(storage.server.takeRequest().getHeaders().get("x-registry-key"), "the header stays with its host");
    }
  }
}
