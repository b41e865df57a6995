package dev.flatpull.fetcher.registry;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredential;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.reference.ImageReference;
import java.io.IOException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.InstantSource;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import mockwebserver3.MockResponse;
import mockwebserver3.MockWebServer;
import mockwebserver3.RecordedRequest;
import mockwebserver3.SocketEffect;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Fault handling of the registry client against a real in-process HTTP server that misbehaves on purpose. */
class RegistryClientFaultTest {
  private static final byte[] BLOB = "0123456789abcdefghijklmnopqrstuvwxyz".getBytes(StandardCharsets.US_ASCII);
  private static final Digest BLOB_DIGEST = Digest.sha256(BLOB);

  private FakeRegistry registry;
  private MockWebServer server;
  private final List<Duration> sleeps = new CopyOnWriteArrayList<>();
  private final FetchStatistics stats = new FetchStatistics();
  private Instant now = Instant.parse("2026-01-01T00:00:00Z");
  private RegistryClients clients;

  @BeforeEach
  void start() throws IOException {
    registry = new FakeRegistry(false).start();
    server = registry.server;
  }

  @AfterEach
  void stop() {
    if (clients != null) {
      clients.close();
    }
    registry.close();
  }

  private RegistryClient client(RegistryCredentials creds, Duration readTimeout) {
    FlatpullConfig config = FlatpullConfig.DEFAULTS;
    config = config.withRegistry(config.registry().withPlainHttp(true)
        .withBackoff(Duration.ofMillis(10), Duration.ofMillis(100))
        .withTimeouts(Duration.ofSeconds(2), readTimeout));
    config = config.withRegistry(new dev.flatpull.config.RegistrySettings(
        Optional.empty(), Optional.empty(), true, 4, config.registry().connectTimeout(), config.registry().readTimeout(),
        4, config.registry().initialBackoff(), config.registry().maxBackoff(), 0));
    InstantSource clock = () -> now;
    clients = new RegistryClients(config, creds, stats, sleeps::add, clock);
    return clients.client(ImageReference.parse(server.getHostName() + ":" + server.getPort() + "/team/app:v1"));
  }

  private RegistryClient client() {
    return client(RegistryCredentials.NONE, Duration.ofSeconds(5));
  }

  private static MockResponse partial(int from, int to) {
    return partialOf(BLOB, ByteRange.between(from, to));
  }

  private static MockResponse bearerChallenge(String realm) {
    return new MockResponse.Builder().code(401)
        .setHeader("WWW-Authenticate", "Bearer realm=\"" + realm + "\",service=\"registry.test\",scope=\"repository:team/app:pull\"")
        .build();
  }

  @Test
  void readRange_bearerChallenge_fetchesTokenWithScopeAndReusesIt() throws Exception {
    RegistryClient c = client();
    String realm = server.url("/token").toString();
    registry.enqueue(bearerChallenge(realm));
    registry.enqueue(new MockResponse.Builder().code(200).body("{\"token\":\"t1\",\"expires_in\":300}").build());
    registry.enqueue(partial(0, 4));
    registry.enqueue(partial(4, 8));

    assertArrayEquals("0123".getBytes(StandardCharsets.US_ASCII), c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
    assertArrayEquals("4567".getBytes(StandardCharsets.US_ASCII), c.readRange(BLOB_DIGEST, new ByteRange(4, 4)));

    RecordedRequest first = server.takeRequest();
    assertNull(first.getHeaders().get("Authorization"));
    RecordedRequest token = server.takeRequest();
    assertEquals("/token", token.getUrl().encodedPath());
    assertEquals("repository:team/app:pull", token.getUrl().queryParameter("scope"));
    assertEquals("registry.test", token.getUrl().queryParameter("service"));
    assertEquals("Bearer t1", server.takeRequest().getHeaders().get("Authorization"));
    assertEquals("Bearer t1", server.takeRequest().getHeaders().get("Authorization"));
    assertEquals(4, server.getRequestCount());
  }

  @Test
  void readRange_tokenRejectedLater_refreshesTokenOnce() throws Exception {
    RegistryClient c = client();
    String realm = server.url("/token").toString();
    registry.enqueue(bearerChallenge(realm));
    registry.enqueue(new MockResponse.Builder().code(200).body("{\"token\":\"old\"}").build());
    registry.enqueue(partial(0, 4));
    registry.enqueue(bearerChallenge(realm));
    registry.enqueue(new MockResponse.Builder().code(200).body("{\"access_token\":\"new\"}").build());
    registry.enqueue(partial(4, 8));

    c.readRange(BLOB_DIGEST, new ByteRange(0, 4));
    assertArrayEquals("4567".getBytes(StandardCharsets.US_ASCII), c.readRange(BLOB_DIGEST, new ByteRange(4, 4)));
    for (int i = 0; i < 3; i++) {
      server.takeRequest();
    }
    assertEquals("Bearer old", server.takeRequest().getHeaders().get("Authorization"));
    server.takeRequest();
    assertEquals("Bearer new", server.takeRequest().getHeaders().get("Authorization"));
  }

  @Test
  void readRange_tokenExpired_fetchesNewTokenWithoutA401() throws Exception {
    RegistryClient c = client();
    String realm = server.url("/token").toString();
    registry.enqueue(bearerChallenge(realm));
    registry.enqueue(new MockResponse.Builder().code(200).body("{\"token\":\"a\",\"expires_in\":60}").build());
    registry.enqueue(partial(0, 4));
    registry.enqueue(new MockResponse.Builder().code(200).body("{\"token\":\"b\",\"expires_in\":60}").build());
    registry.enqueue(partial(0, 4));

    c.readRange(BLOB_DIGEST, new ByteRange(0, 4));
    now = now.plusSeconds(120);
    c.readRange(BLOB_DIGEST, new ByteRange(0, 4));
    for (int i = 0; i < 4; i++) {
      server.takeRequest();
    }
    assertEquals("Bearer b", server.takeRequest().getHeaders().get("Authorization"));
  }

  @Test
  void readRange_tokenServiceWithCredentials_sendsBasicToTokenService() throws Exception {
    RegistryClient c = client(RegistryCredentials.of(Map.of(
        server.getHostName() + ":" + server.getPort(), RegistryCredential.basic("alice", "s3cret"))), Duration.ofSeconds(5));
    registry.enqueue(bearerChallenge(server.url("/token").toString()));
    registry.enqueue(new MockResponse.Builder().code(200).body("{\"token\":\"t\"}").build());
    registry.enqueue(partial(0, 4));
    c.readRange(BLOB_DIGEST, new ByteRange(0, 4));
    server.takeRequest();
    assertEquals("Basic YWxpY2U6czNjcmV0", server.takeRequest().getHeaders().get("Authorization"));
  }

  @Test
  void readRange_tokenServiceRefuses_failsWithAuthenticationError() {
    RegistryClient c = client();
    registry.enqueue(bearerChallenge(server.url("/token").toString()));
    registry.enqueue(new MockResponse.Builder().code(401).build());
    RegistryAuthenticationException e =
        assertThrows(RegistryAuthenticationException.class, () -> c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
    assertTrue(e.getMessage().contains("refused"), e.getMessage());
  }

  @Test
  void readRange_basicChallengeWithoutCredentials_failsNamingTheHost() {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(401).setHeader("WWW-Authenticate", "Basic realm=\"r\"").build());
    RegistryAuthenticationException e =
        assertThrows(RegistryAuthenticationException.class, () -> c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
    assertTrue(e.getMessage().contains("no credentials"), e.getMessage());
  }

  @Test
  void readRange_connectionResetMidBody_retriesAndSucceeds() throws Exception {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(206)
        .setHeader("Content-Range", "bytes 0-35/36").body(new String(BLOB, StandardCharsets.US_ASCII))
        .throttleBody(8, 0, TimeUnit.MILLISECONDS)
        .onResponseBody(SocketEffect.ShutdownConnection.INSTANCE).build());
    registry.enqueue(partial(0, 36));
    assertArrayEquals(BLOB, c.readRange(BLOB_DIGEST, new ByteRange(0, 36)));
    assertEquals(1, sleeps.size());
    assertEquals(1, stats.failures());
  }

  @Test
  void readRange_truncatedBody_retriesAndSucceeds() throws Exception {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(206)
        .setHeader("Content-Range", "bytes 0-35/36").setHeader("Content-Length", "36").body("0123")
        .onResponseEnd(SocketEffect.ShutdownConnection.INSTANCE).build());
    registry.enqueue(partial(0, 36));
    assertArrayEquals(BLOB, c.readRange(BLOB_DIGEST, new ByteRange(0, 36)));
  }

  @Test
  void readRange_alwaysTruncated_failsWithUnavailableAfterMaxAttempts() {
    RegistryClient c = client();
    for (int i = 0; i < 4; i++) {
      registry.enqueue(new MockResponse.Builder().code(206)
          .setHeader("Content-Range", "bytes 0-35/36").setHeader("Content-Length", "36").body("0123")
          .onResponseEnd(SocketEffect.ShutdownConnection.INSTANCE).build());
    }
    RegistryUnavailableException e =
        assertThrows(RegistryUnavailableException.class, () -> c.readRange(BLOB_DIGEST, new ByteRange(0, 36)));
    assertTrue(e.getMessage().contains("gave up after 4 attempts"), e.getMessage());
    assertInstanceOf(IOException.class, e.getCause());
  }

  @Test
  void readRange_500Then503ThenOk_retriesWithGrowingBackoff() throws Exception {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(500).build());
    registry.enqueue(new MockResponse.Builder().code(503).build());
    registry.enqueue(partial(2, 6));
    assertArrayEquals("2345".getBytes(StandardCharsets.US_ASCII), c.readRange(BLOB_DIGEST, new ByteRange(2, 4)));
    assertEquals(2, sleeps.size());
    sleeps.forEach(d -> assertTrue(d.toMillis() <= 100, "back-off is capped: " + d));
  }

  /** A request's duration, as the listener hears it, is measured on the client's clock, not the machine's. */
  @Test
  void requestDurations_areMeasuredOnTheInjectedClock() throws Exception {
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    java.util.concurrent.atomic.AtomicLong reads = new java.util.concurrent.atomic.AtomicLong();
    // Each reading of the clock is an hour later: a request measured on it takes whole hours.
    InstantSource clock = () -> now.plus(Duration.ofHours(reads.getAndIncrement()));
    List<Duration> heard = new CopyOnWriteArrayList<>();
    clients = new RegistryClients(config, RegistryCredentials.NONE, new dev.flatpull.fetcher.registry.FetchListener() {
      @Override
      public void requestFinished(RequestKind kind, String host, int status, long bytes, Duration elapsed) {
        heard.add(elapsed);
      }
    }, sleeps::add, clock);
    RegistryClient c = clients.client(ImageReference.parse(server.getHostName() + ":" + server.getPort() + "/team/app:v1"));
    registry.enqueue(partial(0, 4));
    c.readRange(BLOB_DIGEST, new ByteRange(0, 4));
    assertEquals(1, heard.size(), heard.toString());
    assertTrue(heard.get(0).compareTo(Duration.ofHours(1)) >= 0 && heard.get(0).toNanos() % 3_600_000_000_000L == 0,
        "measured on the injected clock: " + heard);
  }

  @Test
  void readRange_registryAway_retriesWithTheDefaultBackoffSpanAtLeastSixSeconds() throws Exception {
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true)
        .withTimeouts(Duration.ofSeconds(2), Duration.ofSeconds(5)));
    clients = new RegistryClients(config, RegistryCredentials.NONE, stats, sleeps::add, () -> now);
    RegistryClient c = clients.client(ImageReference.parse(server.getHostName() + ":" + server.getPort() + "/team/app:v1"));
    int attempts = config.registry().maxAttempts();
    for (int i = 0; i < attempts; i++) {
      registry.enqueue(new MockResponse.Builder().code(503).build());
    }
    assertThrows(RegistryUnavailableException.class, () -> c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
    assertEquals(attempts - 1, sleeps.size());
    long total = sleeps.stream().mapToLong(Duration::toMillis).sum();
    // Each wait is at least half its step: 100 + 200 + ... + 3200 ms.
    assertTrue(total >= 6300, "the default retries gave up after " + total + " ms of back-off: " + sleeps);
    assertTrue(total <= 12600, "back-off beyond the steps: " + sleeps);
  }

  @Test
  void readRange_always503_failsWithStatusInTheError() {
    RegistryClient c = client();
    for (int i = 0; i < 4; i++) {
      registry.enqueue(new MockResponse.Builder().code(503)
          .body("{\"errors\":[{\"code\":\"UNAVAILABLE\",\"message\":\"maintenance\"}]}").build());
    }
    RegistryUnavailableException e =
        assertThrows(RegistryUnavailableException.class, () -> c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
    assertEquals(503, e.status());
    assertTrue(e.getMessage().contains("maintenance"), e.getMessage());
  }

  @Test
  void readRange_429WithRetryAfter_waitsAtLeastThatLong() throws Exception {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(429).setHeader("Retry-After", "3").build());
    registry.enqueue(partial(0, 4));
    c.readRange(BLOB_DIGEST, new ByteRange(0, 4));
    assertEquals(List.of(Duration.ofSeconds(3)), sleeps);
  }

  @Test
  void readRange_slowResponse_timesOutRetriesAndSucceeds() throws Exception {
    RegistryClient c = client(RegistryCredentials.NONE, Duration.ofMillis(300));
    registry.enqueue(new MockResponse.Builder().code(206).setHeader("Content-Range", "bytes 0-3/36").body("0123")
        .headersDelay(2, TimeUnit.SECONDS).build());
    registry.enqueue(partial(0, 4));
    assertArrayEquals("0123".getBytes(StandardCharsets.US_ASCII), c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
    assertEquals(1, stats.failures());
  }

  @Test
  void readRange_alwaysSlow_failsWithTimeoutAsCause() {
    RegistryClient c = client(RegistryCredentials.NONE, Duration.ofMillis(200));
    for (int i = 0; i < 4; i++) {
      registry.enqueue(new MockResponse.Builder().code(206).setHeader("Content-Range", "bytes 0-3/36").body("0123")
          .headersDelay(2, TimeUnit.SECONDS).build());
    }
    RegistryUnavailableException e =
        assertThrows(RegistryUnavailableException.class, () -> c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
    assertInstanceOf(SocketTimeoutException.class, e.getCause());
  }

  @Test
  void readRange_registryIgnoresRangeAndSends200_returnsTheRequestedSlice() throws Exception {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(200).body(new String(BLOB, StandardCharsets.US_ASCII)).build());
    assertArrayEquals("abcd".getBytes(StandardCharsets.US_ASCII), c.readRange(BLOB_DIGEST, new ByteRange(10, 4)));
    assertEquals("bytes=10-13", server.takeRequest().getHeaders().get("Range"));
  }

  @Test
  void readRange_registryIgnoresRangeAndSends200_theRestOfTheBlobIsNotRead_itsConnectionIsDropped() throws Exception {
    RegistryClient c = client();
    ByteRange head = new ByteRange(0, 16);
    registry.enqueue(whole(BIG));
    assertArrayEquals(slice(BIG, head), c.readRange(BIG_DIGEST, head));
    registry.enqueue(partialOf(BIG, head));
    assertArrayEquals(slice(BIG, head), c.readRange(BIG_DIGEST, head));
    RecordedRequest first = server.takeRequest();
    RecordedRequest second = server.takeRequest();
    // Closing the 200 would have read on through the 4 MiB to reuse the connection (okhttp drains up to 100 ms of a
    // body, all of it on loopback): the next request would have come on the same connection.
    assertTrue(first.getConnectionIndex() != second.getConnectionIndex(), "the 200's connection was reused ("
        + first.getConnectionIndex() + "), so the rest of the blob was read");
  }

  @Test
  void readRange_contentRangeDoesNotMatch_failsWithProtocolError() {
    RegistryClient c = client();
    registry.enqueue(partial(4, 8));
    RegistryProtocolException e =
        assertThrows(RegistryProtocolException.class, () -> c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
    assertTrue(e.getMessage().contains("Content-Range"), e.getMessage());
  }

  @Test
  void readRange_redirectToAnotherHost_dropsAuthorization() throws Exception {
    try (FakeRegistry storage = new FakeRegistry(false).start()) {
      RegistryClient c = client();
      registry.enqueue(bearerChallenge(server.url("/token").toString()));
      registry.enqueue(new MockResponse.Builder().code(200).body("{\"token\":\"secret\"}").build());
      // 127.0.0.1 vs localhost: a different host for okhttp even if the port were the same.
      String location = "http://127.0.0.1:" + storage.server.getPort() + "/bucket/blob";
      registry.enqueue(new MockResponse.Builder().code(307).setHeader("Location", location).build());
      storage.enqueue(partial(0, 4));
      assertArrayEquals("0123".getBytes(StandardCharsets.US_ASCII), c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
      server.takeRequest();
      server.takeRequest();
      assertEquals("Bearer secret", server.takeRequest().getHeaders().get("Authorization"));
      RecordedRequest atStorage = storage.server.takeRequest();
      assertNull(atStorage.getHeaders().get("Authorization"));
      assertEquals("bytes=0-3", atStorage.getHeaders().get("Range"));
    }
  }

  @Test
  void fetchManifest_notFound_failsWithNotFoundCarryingTheRegistryError() {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(404)
        .body("{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\",\"message\":\"manifest unknown\"}]}").build());
    RegistryNotFoundException e = assertThrows(RegistryNotFoundException.class, () -> c.fetchManifest("v1"));
    assertTrue(e.getMessage().contains("MANIFEST_UNKNOWN"), e.getMessage());
    assertEquals(404, e.status());
  }

  @Test
  void fetchManifest_byDigestWithOtherBytes_failsVerification() {
    RegistryClient c = client();
    byte[] manifest = manifestJson();
    registry.enqueue(new MockResponse.Builder().code(200).body(new String(manifest, StandardCharsets.UTF_8) + " ").build());
    assertThrows(DigestMismatchException.class, () -> c.fetchManifest(Digest.sha256(manifest).toString()));
  }

  @Test
  void fetchManifest_byTag_parsesAndSendsAcceptHeader() throws Exception {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(200).setHeader("Content-Type", MediaTypes.OCI_MANIFEST)
        .body(new String(manifestJson(), StandardCharsets.UTF_8)).build());
    ImageManifest m = (ImageManifest) c.fetchManifest("v1");
    assertEquals(1, m.layers().size());
    assertTrue(server.takeRequest().getHeaders().get("Accept").contains(MediaTypes.OCI_INDEX));
  }

  @Test
  void fetchBlob_wrongBytes_failsVerificationAndReturnsNothing() {
    RegistryClient c = client();
    byte[] wrong = BLOB.clone();
    wrong[3] ^= 1;
    for (int i = 0; i < 4; i++) {
      registry.enqueue(new MockResponse.Builder().code(200).body(new String(wrong, StandardCharsets.US_ASCII)).build());
    }
    Descriptor d = new Descriptor(MediaTypes.OCI_CONFIG, BLOB_DIGEST, BLOB.length, Map.of());
    DigestMismatchException e = assertThrows(DigestMismatchException.class, () -> c.fetchBlob(d));
    assertEquals(BLOB_DIGEST, e.expected());
    assertEquals(1, server.getRequestCount(), "a digest mismatch is not a transient fault");
  }

  @Test
  void downloadBlob_resetThenOk_writesVerifiedFileOnly(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
      throws Exception {
    RegistryClient c = client();
    registry.enqueue(new MockResponse.Builder().code(200).setHeader("Content-Length", "36").body("0123")
        .onResponseEnd(SocketEffect.ShutdownConnection.INSTANCE).build());
    registry.enqueue(new MockResponse.Builder().code(200).body(new String(BLOB, StandardCharsets.US_ASCII)).build());
    java.nio.file.Path target = dir.resolve("blob");
    c.downloadBlob(new Descriptor(MediaTypes.OCI_LAYER, BLOB_DIGEST, BLOB.length, Map.of()), target);
    assertArrayEquals(BLOB, java.nio.file.Files.readAllBytes(target));
    assertEquals(1, java.nio.file.Files.list(dir).count(), "no partial file is left behind");
  }

  @Test
  void readRange_manyThreads_neverExceedTheConcurrencyBound() throws Exception {
    RegistryClient c = client();
    registry.content.putBlob(BLOB);
    registry.blobDelayMillis = 100;
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(12);
    try {
      List<java.util.concurrent.Future<byte[]>> all = new java.util.ArrayList<>();
      for (int i = 0; i < 12; i++) {
        all.add(pool.submit(() -> c.readRange(BLOB_DIGEST, new ByteRange(0, 4))));
      }
      for (java.util.concurrent.Future<byte[]> f : all) {
        assertArrayEquals("0123".getBytes(StandardCharsets.US_ASCII), f.get());
      }
    } finally {
      pool.shutdownNow();
    }
    int peak = registry.peakInFlight.get();
    assertTrue(peak <= 4, "at most max_concurrent_requests (4) in flight, saw " + peak);
    assertTrue(peak >= 2, "requests do run concurrently, saw " + peak);
  }

  @Test
  void readRange_sequentialRequests_reuseOneConnection() throws Exception {
    RegistryClient c = client();
    for (int i = 0; i < 3; i++) {
      registry.enqueue(partial(0, 4));
    }
    for (int i = 0; i < 3; i++) {
      c.readRange(BLOB_DIGEST, new ByteRange(0, 4));
    }
    for (int i = 0; i < 3; i++) {
      assertEquals(0, server.takeRequest().getConnectionIndex(), "request " + i + " reused the first connection");
    }
  }

  @Test
  void resolve_index_followsThePlatformsManifest() throws Exception {
    RegistryClient c = client();
    byte[] manifest = manifestJson();
    Digest md = Digest.sha256(manifest);
    String index = "{\"schemaVersion\":2,\"mediaType\":\"" + MediaTypes.OCI_INDEX + "\",\"manifests\":["
        + "{\"mediaType\":\"" + MediaTypes.OCI_MANIFEST + "\",\"digest\":\"" + BLOB_DIGEST + "\",\"size\":1,"
        + "\"platform\":{\"os\":\"linux\",\"architecture\":\"riscv64\"}},"
        + "{\"mediaType\":\"" + MediaTypes.OCI_MANIFEST + "\",\"digest\":\"" + md + "\",\"size\":" + manifest.length + ","
        + "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";
    registry.enqueue(new MockResponse.Builder().code(200).body(index).build());
    registry.enqueue(new MockResponse.Builder().code(200).body(new String(manifest, StandardCharsets.UTF_8)).build());
    RegistryClient.ResolvedImage r = c.resolve(ImageReference.parse("h.io/team/app:v1"),
        dev.flatpull.fetcher.oci.Platform.parse("linux/amd64"));
    assertEquals(md, r.manifest().digest());
    assertTrue(r.indexDigest().isPresent());
    server.takeRequest();
    assertEquals("/v2/team/app/manifests/" + md, server.takeRequest().getUrl().encodedPath());
  }

  @Test
  void resolve_indexWithoutThePlatform_failsNamingIt() {
    RegistryClient c = client();
    String index = "{\"schemaVersion\":2,\"mediaType\":\"" + MediaTypes.OCI_INDEX + "\",\"manifests\":[]}";
    registry.enqueue(new MockResponse.Builder().code(200).body(index).build());
    RegistryNotFoundException e = assertThrows(RegistryNotFoundException.class,
        () -> c.resolve(ImageReference.parse("h.io/team/app:v1"), dev.flatpull.fetcher.oci.Platform.parse("linux/amd64")));
    assertTrue(e.getMessage().contains("linux/amd64"), e.getMessage());
  }

  @Test
  void readRange_failingMirror_fallsBackToTheOriginAndSendsMirrorHeaders(@org.junit.jupiter.api.io.TempDir java.nio.file.Path hosts)
      throws Exception {
    try (FakeRegistry mirror = new FakeRegistry(false).start()) {
      String host = server.getHostName() + ":" + server.getPort();
      java.nio.file.Path dir = java.nio.file.Files.createDirectories(hosts.resolve(host));
      java.nio.file.Files.writeString(dir.resolve("hosts.toml"), "server = \"http://" + host + "\"\n"
          + "[host.\"http://127.0.0.1:" + mirror.server.getPort() + "\"]\n  capabilities = [\"pull\"]\n"
          + "  [host.\"http://127.0.0.1:" + mirror.server.getPort() + "\".header]\n    x-mirror-token = \"abc\"\n");
      FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(new dev.flatpull.config.RegistrySettings(
          Optional.of(hosts), Optional.empty(), false, 4, Duration.ofSeconds(2), Duration.ofSeconds(5), 2,
          Duration.ofMillis(1), Duration.ofMillis(5), 0));
      clients = new RegistryClients(config, RegistryCredentials.NONE, stats, sleeps::add, () -> now);
      RegistryClient c = clients.client(ImageReference.parse(host + "/team/app:v1"));
      mirror.enqueue(new MockResponse.Builder().code(500).build());
      mirror.enqueue(new MockResponse.Builder().code(500).build());
      registry.enqueue(partial(0, 4));
      assertArrayEquals("0123".getBytes(StandardCharsets.US_ASCII), c.readRange(BLOB_DIGEST, new ByteRange(0, 4)));
      assertEquals(2, mirror.server.getRequestCount(), "the mirror is tried first, with its retries");
      assertEquals("abc", mirror.server.takeRequest().getHeaders().get("x-mirror-token"));
      assertNull(server.takeRequest().getHeaders().get("x-mirror-token"), "mirror headers stay with the mirror");
    }
  }

  /** A client whose registry host has {@code mirror} as its hosts.toml mirror, the test's server as origin. */
  private RegistryClient mirroredClient(FakeRegistry mirror, java.nio.file.Path hosts) throws IOException {
    String host = server.getHostName() + ":" + server.getPort();
    java.nio.file.Path dir = java.nio.file.Files.createDirectories(hosts.resolve(host));
    java.nio.file.Files.writeString(dir.resolve("hosts.toml"), "server = \"http://" + host + "\"\n"
        + "[host.\"http://127.0.0.1:" + mirror.server.getPort() + "\"]\n  capabilities = [\"pull\", \"resolve\"]\n");
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(new dev.flatpull.config.RegistrySettings(
        Optional.of(hosts), Optional.empty(), false, 4, Duration.ofSeconds(2), Duration.ofSeconds(5), 2,
        Duration.ofMillis(1), Duration.ofMillis(5), 0));
    clients = new RegistryClients(config, RegistryCredentials.NONE, stats, sleeps::add, () -> now);
    return clients.client(ImageReference.parse(host + "/team/app:v1"));
  }

  private static final byte[] BIG = new java.util.Random(7).ints(4 << 20, 0, 256)
      .collect(java.io.ByteArrayOutputStream::new, (o, b) -> o.write(b), (a, b) -> a.write(b.toByteArray(), 0, b.size()))
      .toByteArray();
  private static final Digest BIG_DIGEST = Digest.sha256(BIG);

  private static MockResponse whole(byte[] blob) {
    return new MockResponse.Builder().code(200).body(new okio.Buffer().write(blob)).build();
  }

  private static MockResponse partialOf(byte[] blob, ByteRange r) {
    return new MockResponse.Builder().code(206)
        .setHeader("Content-Range", "bytes " + r.offset() + "-" + (r.end() - 1) + "/" + blob.length)
        .body(new okio.Buffer().write(java.util.Arrays.copyOfRange(blob, (int) r.offset(), (int) r.end()))).build();
  }

  private static byte[] slice(byte[] blob, ByteRange r) {
    return java.util.Arrays.copyOfRange(blob, (int) r.offset(), (int) r.end());
  }

  @Test
  void readRange_mirrorSendsWholeBlobForATailRange_givesItUpReadsTheOriginAndAsksTheMirrorAgainLater(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path hosts) throws Exception {
    try (FakeRegistry mirror = new FakeRegistry(false).start()) {
      RegistryClient c = mirroredClient(mirror, hosts);
      ByteRange tail = new ByteRange(BIG.length - 51, 51);
      mirror.enqueue(whole(BIG));
      registry.enqueue(partialOf(BIG, tail));
      assertArrayEquals(slice(BIG, tail), c.readRange(BIG_DIGEST, tail));
      assertEquals(1, mirror.server.getRequestCount());
      assertEquals(1, server.getRequestCount(), "the range went to the origin");
      assertEquals(1, stats.rangesGivenUp());
      assertTrue(stats.bytes(RequestKind.BLOB_RANGE) < 1024, "the whole blob was not read: " + stats);

      ByteRange middle = new ByteRange(2 << 20, 4096);
      registry.enqueue(partialOf(BIG, middle));
      assertArrayEquals(slice(BIG, middle), c.readRange(BIG_DIGEST, middle));
      assertEquals(1, mirror.server.getRequestCount(), "while the mirror fills its cache, the blob's ranges skip it");
      assertEquals(2, server.getRequestCount());

      now = now.plus(IgnoredRanges.FIRST_RETRY).plusSeconds(1);
      mirror.enqueue(partialOf(BIG, middle));
      assertArrayEquals(slice(BIG, middle), c.readRange(BIG_DIGEST, middle));
      assertEquals(2, mirror.server.getRequestCount(), "after the back-off the mirror is asked again");
      mirror.enqueue(partialOf(BIG, tail));
      assertArrayEquals(slice(BIG, tail), c.readRange(BIG_DIGEST, tail));
      assertEquals(3, mirror.server.getRequestCount(), "a mirror that honoured a range keeps the blob's ranges");
      assertEquals(2, server.getRequestCount());
    }
  }

  @Test
  void readRange_mirrorKeepsIgnoringRanges_backOffDoubles(@org.junit.jupiter.api.io.TempDir java.nio.file.Path hosts)
      throws Exception {
    try (FakeRegistry mirror = new FakeRegistry(false).start()) {
      RegistryClient c = mirroredClient(mirror, hosts);
      ByteRange tail = new ByteRange(BIG.length - 51, 51);
      for (int round = 0; round < 2; round++) {
        mirror.enqueue(whole(BIG));
        registry.enqueue(partialOf(BIG, tail));
        assertArrayEquals(slice(BIG, tail), c.readRange(BIG_DIGEST, tail));
        now = now.plus(IgnoredRanges.FIRST_RETRY).plusSeconds(1);
      }
      assertEquals(2, mirror.server.getRequestCount());
      registry.enqueue(partialOf(BIG, tail));
      assertArrayEquals(slice(BIG, tail), c.readRange(BIG_DIGEST, tail));
      assertEquals(2, mirror.server.getRequestCount(), "the second refusal doubled the wait beyond the first back-off");
      assertEquals(2, stats.rangesGivenUp());
    }
  }

  @Test
  void readRange_mirrorSendsWholeBlobForARangeNearTheStart_readsThroughIt(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path hosts) throws Exception {
    try (FakeRegistry mirror = new FakeRegistry(false).start()) {
      RegistryClient c = mirroredClient(mirror, hosts);
      ByteRange head = new ByteRange(1000, 2000);
      mirror.enqueue(whole(BIG));
      assertArrayEquals(slice(BIG, head), c.readRange(BIG_DIGEST, head));
      assertEquals(0, server.getRequestCount(), "a range near the start costs no more than another request");
      assertEquals(1, stats.rangesReadThrough());
    }
  }

  @Test
  void readRange_originDownAndMirrorIgnoringRanges_readsThroughTheMirror(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path hosts) throws Exception {
    try (FakeRegistry mirror = new FakeRegistry(false).start()) {
      RegistryClient c = mirroredClient(mirror, hosts);
      ByteRange tail = new ByteRange(BIG.length - 51, 51);
      mirror.enqueue(whole(BIG));
      registry.enqueue(partialOf(BIG, tail));
      c.readRange(BIG_DIGEST, tail);
      registry.enqueue(new MockResponse.Builder().code(503).build());
      registry.enqueue(new MockResponse.Builder().code(503).build());
      mirror.enqueue(whole(BIG));
      assertArrayEquals(slice(BIG, tail), c.readRange(BIG_DIGEST, tail),
          "with the origin away, the mirror's whole blob is the only way to the range");
      assertEquals(1, stats.rangesReadThrough());
    }
  }

  @Test
  void readRange_mirrorAndOriginBothIgnoringRanges_readsThroughTheFirstWithoutAskingInVain(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path hosts) throws Exception {
    try (FakeRegistry mirror = new FakeRegistry(false).start()) {
      RegistryClient c = mirroredClient(mirror, hosts);
      ByteRange tail = new ByteRange(BIG.length - 51, 51);
      mirror.enqueue(whole(BIG));
      registry.enqueue(whole(BIG));
      assertArrayEquals(slice(BIG, tail), c.readRange(BIG_DIGEST, tail));
      mirror.enqueue(whole(BIG));
      assertArrayEquals(slice(BIG, tail), c.readRange(BIG_DIGEST, tail));
      assertEquals(2, mirror.server.getRequestCount());
      assertEquals(1, server.getRequestCount(), "the second read was read through at the mirror, not given up there");
      assertEquals(1, stats.rangesGivenUp());
      assertEquals(2, stats.rangesReadThrough());
    }
  }

  @Test
  void readRange_originIgnoresRangeFarIntoTheBlob_readsThroughItAsTheLastResort() throws Exception {
    RegistryClient c = client();
    ByteRange tail = new ByteRange(BIG.length - 51, 51);
    registry.enqueue(whole(BIG));
    assertArrayEquals(slice(BIG, tail), c.readRange(BIG_DIGEST, tail));
    assertEquals(1, stats.rangesReadThrough());
  }

  @Test
  void referrersApi_mirrorWithoutTheApiAndTheOriginAway_saysNoApiSoTheTagSchemaIsTried(
      @org.junit.jupiter.api.io.TempDir java.nio.file.Path hosts) throws Exception {
    try (FakeRegistry mirror = new FakeRegistry(false).start()) {
      RegistryClient c = mirroredClient(mirror, hosts);
      mirror.enqueue(new MockResponse.Builder().code(404).build());
      registry.enqueue(new MockResponse.Builder().code(503).build());
      registry.enqueue(new MockResponse.Builder().code(503).build());
      assertTrue(c.referrersApi(BLOB_DIGEST).isEmpty());
      assertEquals(2, server.getRequestCount(), "the origin was asked, with its retries");
      registry.enqueue(new MockResponse.Builder().code(503).build());
      registry.enqueue(new MockResponse.Builder().code(503).build());
      mirror.enqueue(new MockResponse.Builder().code(404).build());
      assertThrows(RegistryUnavailableException.class, () -> c.fetchManifest("v1"),
          "for anything but the optional referrers API, an origin away is not a 'not found'");
    }
  }

  private static byte[] manifestJson() {
    return ("{\"schemaVersion\":2,\"mediaType\":\"" + MediaTypes.OCI_MANIFEST + "\",\"config\":{\"mediaType\":\""
        + MediaTypes.OCI_CONFIG + "\",\"digest\":\"" + BLOB_DIGEST + "\",\"size\":36},\"layers\":[{\"mediaType\":\""
        + MediaTypes.OCI_LAYER_GZIP + "\",\"digest\":\"" + BLOB_DIGEST + "\",\"size\":36}]}").getBytes(StandardCharsets.UTF_8);
  }
}
