package dev.flatpull.fetcher.registry;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.config.ConfigException;
import dev.flatpull.config.RegistryCredential;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.config.RegistryEndpoint;
import dev.flatpull.config.RegistryEndpoint.Capability;
import dev.flatpull.config.RegistryHosts;
import dev.flatpull.config.RegistrySettings;
import dev.flatpull.core.BoundedInputStream;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.oci.ManifestFormatException;
import dev.flatpull.fetcher.oci.UnsupportedMediaTypeException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.InstantSource;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import okhttp3.ConnectionPool;
import okhttp3.FormBody;
import okhttp3.HttpUrl;
import okhttp3.OkHttpClient;
import okhttp3.Request;
import okhttp3.RequestBody;
import okhttp3.Response;

/**
 * The HTTP engine behind {@link RegistryClient}: the only class that speaks okhttp. It owns, for every request,
 * endpoint selection (mirrors in hosts.toml order, then the origin), authentication (anonymous, basic, and the bearer
 * challenge flow with cached tokens refreshed on 401), bounded concurrency, and retries with exponential back-off and
 * equal jitter on connection failures, timeouts, truncated bodies, 5xx, 408 and 429 ({@code Retry-After} honoured).
 * Thread-safe.
 */
final class RegistryHttp implements AutoCloseable {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Duration MAX_RETRY_AFTER = Duration.ofSeconds(60);
  private static final String USER_AGENT = "flatpull/0.1";
  /**
   * How far into a blob a range may start and still be read through a {@code 200} that carries the whole blob: for
   * ranges further in, another endpoint serves them with fewer bytes moved.
   */
  static final long READ_THROUGH_LIMIT = 256 * 1024;

  /** Reads a successful response. May throw; transport exceptions thrown from here are retried. */
  @FunctionalInterface
  interface ResponseHandler<T> {
    T handle(Response response, InputStream body) throws IOException;
  }

  /**
   * One logical request.
   *
   * @param path path under the endpoint's API root ({@code /NAME/blobs/DIGEST}), or an absolute URL (an upload
   *     location), which is then only sent to the endpoint it came from
   * @param body replayable body, or null
   * @param range the blob range a range read asks for (its {@code Range} header is in {@code headers}), or null
   */
  record Call(
      RequestKind kind, Capability capability, String method, String path, Map<String, String> headers,
      RequestBody body, String repository, boolean push, ByteRange range) {
    String scope() {
      return "repository:" + repository + (push ? ":pull,push" : ":pull");
    }
  }

  private final OkHttpClient client;
  private final OkHttpClient insecureClient;
  private final java.util.Map<RegistryEndpoint, OkHttpClient> tlsClients = new java.util.concurrent.ConcurrentHashMap<>();
  private final RegistrySettings settings;
  private final RegistryHosts hosts;
  private final RegistryCredentials credentials;
  private final BearerTokens tokens;
  private final Map<String, AuthChallenge> challenges = new ConcurrentHashMap<>();
  private final Semaphore permits;
  private final FetchListener listener;
  private final Sleeper sleeper;
  private final IgnoredRanges ignoredRanges;

  // Requests' durations, for the listener: the clock the client is given, so that tests that inject time see them.
  private final InstantSource clock;

  RegistryHttp(
      RegistrySettings settings, RegistryHosts hosts, RegistryCredentials credentials, FetchListener listener,
      Sleeper sleeper, InstantSource clock) {
    this.settings = settings;
    this.hosts = hosts;
    this.credentials = credentials;
    this.listener = listener;
    this.sleeper = sleeper;
    this.clock = clock;
    this.tokens = new BearerTokens(clock);
    this.ignoredRanges = new IgnoredRanges(clock);
    this.permits = new Semaphore(settings.maxConcurrentRequests(), true);
    this.client =
        new OkHttpClient.Builder()
            .connectTimeout(settings.connectTimeout())
            .readTimeout(settings.readTimeout())
            .writeTimeout(settings.readTimeout())
            .connectionPool(new ConnectionPool(settings.maxConcurrentRequests(), 5, TimeUnit.MINUTES))
            // Retries are ours, so that they are counted, backed off and bounded.
            .retryOnConnectionFailure(false)
            // okhttp drops Authorization when a redirect leaves the host (blob storage), as the spec requires.
            .followRedirects(true)
            // From http to https is followed; the other way round is refused by guardRedirects.
            .followSslRedirects(true)
            .addNetworkInterceptor(RegistryHttp::guardRedirects)
            .build();
    this.insecureClient = InsecureTls.derive(client);
  }

  /**
   * Sends {@code call} to each endpoint of {@code host} able to serve it until one succeeds. A range read goes first to
   * the endpoints that have not lately ignored ranges of its blob, then to those that have: the last one's whole blob
   * is read through to the range, and so is the first one's when all of them ignored ranges lately.
   */
  <T> T execute(String host, Call call, ResponseHandler<T> handler) throws IOException {
    List<RegistryEndpoint> candidates = endpoints(host, call.capability());
    boolean readThrough = false;
    if (call.range() != null) {
      List<RegistryEndpoint> honouring = new ArrayList<>(candidates.size());
      List<RegistryEndpoint> ignoring = new ArrayList<>(1);
      for (RegistryEndpoint e : candidates) {
        (ignoredRanges.avoid(e.apiRoot(), call.path()) ? ignoring : honouring).add(e);
      }
      // When every endpoint ignored this blob's ranges lately, one must be read through: the first that answers.
      readThrough = honouring.isEmpty();
      if (!readThrough && !ignoring.isEmpty()) {
        honouring.addAll(ignoring);
        candidates = honouring;
      }
    }
    RegistryException last = null;
    RegistryNotFoundException notFound = null;
    for (int i = 0; i < candidates.size(); i++) {
      try {
        return executeOn(candidates.get(i), call, handler, readThrough || i == candidates.size() - 1);
      } catch (RegistryNotFoundException e) {
        notFound = e;
        last = e;
      } catch (RegistryException e) {
        last = e;
      }
    }
    // The referrers API is optional: an endpoint's 404 says it does not serve it, and the tag schema, which travels
    // through mirrors like any tag, is the way on even when a later endpoint (an unreachable origin) failed otherwise.
    throw call.kind() == RequestKind.REFERRERS && notFound != null ? notFound : last;
  }

  /** The first endpoint of {@code host} that can serve {@code capability}; uploads stay on it. */
  RegistryEndpoint primaryEndpoint(String host, Capability capability) throws IOException {
    return endpoints(host, capability).get(0);
  }

  private List<RegistryEndpoint> endpoints(String host, Capability capability) throws IOException {
    List<RegistryEndpoint> all;
    try {
      all = hosts.endpoints(host);
    } catch (ConfigException e) {
      throw new IOException("registry host configuration: " + e.getMessage(), e);
    }
    List<RegistryEndpoint> out = new ArrayList<>();
    for (RegistryEndpoint e : all) {
      if (e.capabilities().contains(capability)) {
        out.add(e);
      }
    }
    if (out.isEmpty()) {
      throw new RegistryException("no endpoint of " + host + " has capability " + capability, host, 0, null);
    }
    return out;
  }

  /** Sends {@code call} to {@code endpoint} only (an upload stays where it started). */
  <T> T executeOn(RegistryEndpoint endpoint, Call call, ResponseHandler<T> handler) throws IOException {
    return executeOn(endpoint, call, handler, true);
  }

  /**
   * @param lastResort no endpoint follows, so a range read answered with the whole blob is read through to the range
   *     rather than given up
   */
  private <T> T executeOn(RegistryEndpoint endpoint, Call call, ResponseHandler<T> handler, boolean lastResort)
      throws IOException {
    String url = call.path().startsWith("http://") || call.path().startsWith("https://")
        ? call.path()
        : endpoint.apiRoot() + call.path();
    String authHost = endpoint.base().getAuthority();
    OkHttpClient http = endpoint.skipVerify() ? insecureClient : clientFor(endpoint);
    int attempt = 0;
    boolean refreshedAuth = false;
    while (true) {
      attempt++;
      java.time.Instant started = clock.instant();
      Duration retryAfter = Duration.ZERO;
      IOException failure;
      acquire();
      try {
        Optional<String> authorization = authorization(authHost, endpoint, call);
        Request.Builder rb = new Request.Builder().url(url).header("User-Agent", USER_AGENT);
        endpoint.headers().forEach((k, vs) -> vs.forEach(v -> rb.addHeader(k, v)));
        if (!endpoint.headers().isEmpty()) {
          HttpUrl at = HttpUrl.get(url);
          rb.tag(ConfiguredHeaders.class, new ConfiguredHeaders(at.host(), at.port(), endpoint.headers().keySet()));
        }
        call.headers().forEach(rb::header);
        authorization.ifPresent(a -> rb.header("Authorization", a));
        rb.method(call.method(), call.body());
        okhttp3.Call exchange = http.newCall(rb.build());
        try (Response response = exchange.execute()) {
          int status = response.code();
          if (status == 401) {
            drain(response);
            String challenge = response.header("WWW-Authenticate");
            if (refreshedAuth) {
              throw new RegistryAuthenticationException(
                  "the registry rejected fresh credentials (challenge: " + challenge + ")", url, status, null);
            }
            authorization.ifPresent(a -> forget(authHost, call, a));
            learn(authHost, challenge, url);
            refreshedAuth = true;
            attempt--;
            continue;
          }
          if (status == 403) {
            throw new RegistryAuthenticationException("access denied" + errorDetail(response), url, status, null);
          }
          if (status == 404) {
            throw new RegistryNotFoundException("not found" + errorDetail(response), url, status, null);
          }
          if (status == 408 || status == 429 || status >= 500) {
            retryAfter = retryAfter(response.header("Retry-After"));
            failure = new RegistryUnavailableException("transient failure" + errorDetail(response), url, status, null);
          } else if (status >= 300) {
            throw new RegistryProtocolException("unexpected response" + errorDetail(response), url, status, null);
          } else {
            boolean wholeBlobForRange = call.range() != null && status == 200;
            if (call.range() != null) {
              rangeAnswered(endpoint, call, status, lastResort, authHost, url, started, exchange);
            }
            // Unbounded here: each handler applies the limit that fits what it reads.
            BoundedInputStream body = new BoundedInputStream(response.body().byteStream(), url, Long.MAX_VALUE);
            T result;
            try {
              result = handler.handle(response, body);
            } finally {
              notifyFinished(call.kind(), authHost, status, body.count(), started);
              if (wholeBlobForRange || (call.range() != null && body.count() < call.range().length())) {
                // Closing would read on to reuse the connection (okhttp discards up to 100 ms of a body, megabytes
                // on a fast link); the rest of the blob (or of a range its reader stopped short of, as a runtime-image
                // stream does at a frame it does not need) is not wanted, the connection is not.
                exchange.cancel();
              }
            }
            return result;
          }
        }
      } catch (RangeIgnoredException e) {
        throw e;
      } catch (IOException e) {
        if (!isTransient(e)) {
          notifyFailed(call.kind(), authHost, e, false);
          throw e;
        }
        failure = e;
      } finally {
        permits.release();
      }
      boolean willRetry = attempt < settings.maxAttempts();
      notifyFailed(call.kind(), authHost, failure, willRetry);
      if (!willRetry) {
        int status = failure instanceof RegistryException re ? re.status() : 0;
        throw new RegistryUnavailableException(
            "gave up after " + attempt + " attempts: " + failure.getMessage(), url, status, failure);
      }
      pause(backoff(attempt, retryAfter));
    }
  }

  /**
   * Remembers whether {@code endpoint} honoured a range read, and gives up a whole-blob answer to a range far into the
   * blob when another endpoint can serve it. Dropping the response does not stop a pull-through cache's own fill of
   * the blob (the distribution registry stores it in the background), so the cache is asked again later.
   */
  private void rangeAnswered(
      RegistryEndpoint endpoint, Call call, int status, boolean lastResort, String authHost, String url, java.time.Instant started,
      okhttp3.Call exchange) throws RangeIgnoredException {
    if (status == 206) {
      ignoredRanges.honoured(endpoint.apiRoot(), call.path());
      return;
    }
    if (status != 200) {
      return;
    }
    ignoredRanges.ignored(endpoint.apiRoot(), call.path());
    boolean giveUp = !lastResort && call.range().offset() > READ_THROUGH_LIMIT;
    try {
      listener.rangeIgnored(authHost, giveUp);
    } catch (RuntimeException ignored) {
      // A listener must not break fetching.
    }
    if (giveUp) {
      // Cancelled, not closed: closing reads on to keep the connection (see executeOn).
      exchange.cancel();
      notifyFinished(call.kind(), authHost, status, 0, started);
      throw new RangeIgnoredException(
          "range " + call.range() + " answered with the whole blob; reading it from the next endpoint", url);
    }
  }

  private static boolean isTransient(IOException e) {
    if (e instanceof InterruptedIOException && Thread.currentThread().isInterrupted()) {
      return false;
    }
    return !(e instanceof RegistryException
        || e instanceof DigestMismatchException
        || e instanceof SizeLimitExceededException
        || e instanceof ManifestFormatException
        || e instanceof UnsupportedMediaTypeException);
  }

  private void acquire() throws InterruptedIOException {
    try {
      permits.acquire();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted waiting for a registry connection slot");
    }
  }

  private void pause(Duration d) throws InterruptedIOException {
    try {
      sleeper.sleep(d);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted during retry back-off");
    }
  }

  /**
   * Equal-jitter exponential back-off (half of the step fixed, half random), but never shorter than what the registry
   * asked for. Not full jitter: its waits can all come out near zero, and then the retries of a read give up within
   * a fraction of a second of a registry restart; with half fixed, the default retries span at least 6.3 s.
   */
  private Duration backoff(int attempt, Duration retryAfter) {
    long cap = settings.maxBackoff().toMillis();
    long step = Math.min(cap, settings.initialBackoff().toMillis() << Math.min(attempt - 1, 20));
    long jittered = step / 2 + ThreadLocalRandom.current().nextLong(step - step / 2 + 1);
    long wait = Math.max(jittered, retryAfter.toMillis());
    return Duration.ofMillis(Math.min(wait, MAX_RETRY_AFTER.toMillis()));
  }

  static Duration retryAfter(String header) {
    if (header == null || header.isBlank()) {
      return Duration.ZERO;
    }
    String h = header.trim();
    try {
      return Duration.ofSeconds(Math.max(0, Long.parseLong(h)));
    } catch (NumberFormatException notSeconds) {
      try {
        Duration d = Duration.between(ZonedDateTime.now(), ZonedDateTime.parse(h, DateTimeFormatter.RFC_1123_DATE_TIME));
        return d.isNegative() ? Duration.ZERO : d;
      } catch (DateTimeParseException notDate) {
        return Duration.ZERO;
      }
    }
  }

  // --- authentication ---

  private Optional<String> authorization(String authHost, RegistryEndpoint endpoint, Call call) throws IOException {
    AuthChallenge challenge = challenges.get(authHost);
    if (challenge == null) {
      return Optional.empty();
    }
    Optional<RegistryCredential> cred = credentialFor(endpoint);
    if (challenge.isBasic()) {
      if (cred.isEmpty() || !cred.get().hasBasic()) {
        throw new RegistryAuthenticationException(
            "the registry requires basic authentication and no credentials are configured for " + authHost,
            endpoint.base().toString(), 401, null);
      }
      String pair = cred.get().username().orElseThrow() + ":" + cred.get().password().orElseThrow();
      return Optional.of("Basic " + Base64.getEncoder().encodeToString(pair.getBytes(StandardCharsets.UTF_8)));
    }
    if (challenge.isBearer()) {
      if (cred.isPresent() && cred.get().registryToken().isPresent()) {
        return Optional.of("Bearer " + cred.get().registryToken().get());
      }
      Optional<String> cached = tokens.get(authHost, call.scope());
      if (cached.isPresent()) {
        return Optional.of("Bearer " + cached.get());
      }
      return Optional.of("Bearer " + fetchToken(authHost, challenge, cred, call, endpoint));
    }
    throw new RegistryAuthenticationException(
        "unsupported authentication scheme '" + challenge.scheme() + "'", endpoint.base().toString(), 401, null);
  }

  private Optional<RegistryCredential> credentialFor(RegistryEndpoint endpoint) {
    Optional<RegistryCredential> c = credentials.forHost(endpoint.base().getAuthority());
    return c.isPresent() ? c : credentials.forHost(endpoint.base().getHost());
  }

  private void learn(String authHost, String header, String url) throws RegistryAuthenticationException {
    AuthChallenge c =
        AuthChallenge.parse(header)
            .orElseThrow(
                () -> new RegistryAuthenticationException("401 without a WWW-Authenticate challenge", url, 401, null));
    challenges.put(authHost, c);
  }

  private void forget(String authHost, Call call, String authorization) {
    if (authorization.startsWith("Bearer ")) {
      tokens.invalidate(authHost, call.scope(), authorization.substring("Bearer ".length()));
    }
  }

  /** The headers {@code hosts.toml} configured for an endpoint, which go to its own host only. */
  private record ConfiguredHeaders(String host, int port, java.util.Set<String> names) {}

  /**
   * On every request okhttp sends, redirects included: configured headers are dropped when a redirect leaves the
   * endpoint's host (okhttp drops only Authorization), and a redirect from https to plain http is refused.
   */
  private static Response guardRedirects(okhttp3.Interceptor.Chain chain) throws IOException {
    Request request = chain.request();
    ConfiguredHeaders configured = request.tag(ConfiguredHeaders.class);
    if (configured != null && !(request.url().host().equals(configured.host())
        && request.url().port() == configured.port())) {
      Request.Builder stripped = request.newBuilder();
      configured.names().forEach(stripped::removeHeader);
      request = stripped.build();
    }
    Response response = chain.proceed(request);
    if (response.isRedirect() && request.isHttps()) {
      String location = response.header("Location");
      HttpUrl to = location == null ? null : request.url().resolve(location);
      if (to != null && !to.isHttps()) {
        response.close();
        throw new RegistryProtocolException("refused a redirect from " + request.url().redact() + " to plain http "
            + to.redact(), request.url().host(), response.code(), null);
      }
    }
    return response;
  }

  /** The client for {@code endpoint}: the shared one, or one with its hosts.toml's private CA and client certificate. */
  private OkHttpClient clientFor(RegistryEndpoint endpoint) throws IOException {
    if (endpoint.ca().isEmpty() && endpoint.clients().isEmpty()) {
      return client;
    }
    OkHttpClient derived = tlsClients.get(endpoint);
    if (derived == null) {
      derived = EndpointTls.derive(client, endpoint);
      tlsClients.putIfAbsent(endpoint, derived);
    }
    return derived;
  }

  /** The bearer token flow of the distribution spec's token authentication (GET, or OAuth2 POST for identity tokens). */
  private String fetchToken(String authHost, AuthChallenge challenge, Optional<RegistryCredential> cred, Call call,
      RegistryEndpoint endpoint) throws IOException {
    String realm =
        challenge.param("realm")
            .orElseThrow(() -> new RegistryAuthenticationException("bearer challenge without realm", authHost, 401, null));
    HttpUrl realmUrl = HttpUrl.parse(realm);
    if (realmUrl == null) {
      throw new RegistryAuthenticationException("bearer realm is not a URL: " + realm, authHost, 401, null);
    }
    if (!realmUrl.isHttps() && !endpoint.plainHttp()) {
      // The token request carries the credentials: a registry reached over TLS does not get to send them in clear.
      throw new RegistryAuthenticationException("bearer realm " + realm + " is plain http, and " + endpoint.base()
          + " is reached over https: refused", authHost, 401, null);
    }
    Request.Builder rb = new Request.Builder().header("User-Agent", USER_AGENT);
    Optional<String> service = challenge.param("service");
    if (cred.isPresent() && cred.get().identityToken().isPresent()) {
      FormBody.Builder form =
          new FormBody.Builder()
              .add("grant_type", "refresh_token")
              .add("refresh_token", cred.get().identityToken().get())
              .add("client_id", "flatpull")
              .add("scope", call.scope());
      service.ifPresent(s -> form.add("service", s));
      rb.url(realmUrl).post(form.build());
    } else {
      HttpUrl.Builder ub = realmUrl.newBuilder().addQueryParameter("scope", call.scope());
      service.ifPresent(s -> ub.addQueryParameter("service", s));
      rb.url(ub.build()).get();
      if (cred.isPresent() && cred.get().hasBasic()) {
        String pair = cred.get().username().orElseThrow() + ":" + cred.get().password().orElseThrow();
        rb.header("Authorization", "Basic " + Base64.getEncoder().encodeToString(pair.getBytes(StandardCharsets.UTF_8)));
      }
    }
    java.time.Instant started = clock.instant();
    try (Response r = client.newCall(rb.build()).execute()) {
      byte[] body = r.body().bytes();
      notifyFinished(RequestKind.TOKEN, realmUrl.host(), r.code(), body.length, started);
      if (r.code() == 401 || r.code() == 403) {
        throw new RegistryAuthenticationException("the token service refused our credentials", realm, r.code(), null);
      }
      if (r.code() == 429 || r.code() >= 500) {
        throw new IOException("token service failed transiently with HTTP " + r.code());
      }
      if (r.code() != 200) {
        throw new RegistryAuthenticationException("unexpected token service response", realm, r.code(), null);
      }
      JsonNode json;
      try {
        json = JSON.readTree(body);
      } catch (IOException e) {
        throw new RegistryProtocolException("token response is not JSON", realm, r.code(), e);
      }
      JsonNode token = json.hasNonNull("token") ? json.get("token") : json.get("access_token");
      if (token == null || !token.isTextual() || token.asText().isEmpty()) {
        throw new RegistryProtocolException("token response has no token", realm, r.code(), null);
      }
      long expires = json.path("expires_in").asLong(0);
      Duration lifetime = expires > 0 ? Duration.ofSeconds(expires) : BearerTokens.DEFAULT_LIFETIME;
      tokens.put(authHost, call.scope(), token.asText(), lifetime);
      return token.asText();
    }
  }

  // --- helpers ---

  private static void drain(Response r) {
    try {
      r.body().source().skip(Math.min(64 * 1024, Math.max(0, r.body().contentLength())));
    } catch (IOException | RuntimeException ignored) {
      // The connection is simply not reused.
    }
  }

  /** The OCI error codes and messages of an error body, for the exception message. */
  private static String errorDetail(Response r) {
    try {
      byte[] b = r.body().source().readByteArray(Math.min(8192, Math.max(0, r.body().contentLength())));
      JsonNode errors = JSON.readTree(b).path("errors");
      StringBuilder sb = new StringBuilder();
      for (JsonNode e : errors) {
        sb.append(sb.length() == 0 ? ": " : "; ").append(e.path("code").asText()).append(' ')
            .append(e.path("message").asText());
      }
      return sb.toString();
    } catch (IOException | RuntimeException e) {
      return "";
    }
  }

  private void notifyFinished(RequestKind kind, String host, int status, long bytes, java.time.Instant started) {
    try {
      listener.requestFinished(kind, host, status, bytes, Duration.between(started, clock.instant()));
    } catch (RuntimeException ignored) {
      // A listener must not break fetching.
    }
  }

  private void notifyFailed(RequestKind kind, String host, Throwable cause, boolean willRetry) {
    try {
      listener.requestFailed(kind, host, cause, willRetry);
    } catch (RuntimeException ignored) {
      // A listener must not break fetching.
    }
  }

  @Override
  public void close() {
    client.dispatcher().executorService().shutdown();
    client.connectionPool().evictAll();
  }
}
