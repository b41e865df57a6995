package dev.flatpull.runtimeimage;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.flatpull.core.Digest;
import java.io.IOException;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import mockwebserver3.Dispatcher;
import mockwebserver3.MockResponse;
import mockwebserver3.RecordedRequest;
import okio.Buffer;

/**
 * A registry at the HTTP seam, for what no installable registry does here: the referrers API of OCI distribution
 * 1.1 (answering {@code OCI-Subject} and serving {@code /referrers/}). Without it, it behaves as distribution 2.8:
 * 404 for the referrers API, plain tags. Reads of referrers tags can be slowed to force concurrent writers to race.
 */
final class FakeRegistry extends Dispatcher {
  private static final ObjectMapper JSON = new ObjectMapper();
  final Map<String, byte[]> blobs = new ConcurrentHashMap<>();
  final Map<String, byte[]> manifests = new ConcurrentHashMap<>();
  final Map<String, String> types = new ConcurrentHashMap<>();
  /** Referrer manifests by subject digest (the API's own index). */
  final Map<String, Map<String, byte[]>> referrers = new ConcurrentHashMap<>();
  final AtomicInteger tagWrites = new AtomicInteger();
  /** Every request, as "METHOD PATH[ RANGE]", and the body bytes sent for blobs. */
  final java.util.List<String> log = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
  final java.util.concurrent.atomic.AtomicLong blobBytesSent = new java.util.concurrent.atomic.AtomicLong();
  /** Applied to a blob's bytes before a GET sends them (a truncation, a flipped byte); identity by default. */
  volatile java.util.function.UnaryOperator<byte[]> blobFault = b -> b;
  /** Awaited before a blob GET answers (a held-back stream), when set. */
  volatile java.util.concurrent.CountDownLatch blobHold;
  final boolean referrersApi;
  volatile long tagReadDelayMillis;
  /**
   * When set, a referrers-API request answers only once a referrers tag was read (or after 2 s): a client that asks
   * the two one after another pays the 2 s, one that asks them at once does not.
   */
  volatile java.util.concurrent.CountDownLatch apiAwaitsTagRead;
  /** Referrers-API answers that waited for a tag read in vain (it came only after them, or never). */
  final AtomicInteger apiWaitedInVain = new AtomicInteger();

  FakeRegistry(boolean referrersApi) {
    this.referrersApi = referrersApi;
  }

  @Override
  public MockResponse dispatch(RecordedRequest request) throws InterruptedException {
    String method = request.getMethod();
    String path = request.getUrl().encodedPath();
    String rangeHeader = request.getHeaders().get("Range");
    log.add(method + " " + path + (rangeHeader == null ? "" : " " + rangeHeader));
    try {
      if (path.equals("/v2/")) {
        return code(200);
      }
      String[] parts = path.split("/");
      // /v2/REPO.../KIND/REF
      String kind = parts[parts.length - 2];
      String ref = parts[parts.length - 1];
      if (path.contains("/blobs/uploads/")) {
        if (method.equals("POST")) {
          return new MockResponse.Builder().code(202).setHeader("Location", path + UUID.randomUUID()).build();
        }
        String digest = request.getUrl().queryParameter("digest");
        blobs.put(digest, request.getBody() == null ? new byte[0] : request.getBody().toByteArray());
        return code(201);
      }
      switch (kind) {
        case "blobs" -> {
          byte[] b = blobs.get(ref);
          if (b == null) {
            return code(404);
          }
          if (method.equals("HEAD")) {
            return new MockResponse.Builder().code(200).setHeader("Content-Length", b.length).body(new Buffer())
                .build();
          }
          java.util.concurrent.CountDownLatch hold = blobHold;
          if (hold != null) {
            hold.await();
          }
          long size = b.length;
          b = blobFault.apply(b);
          if (rangeHeader != null) {
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("bytes=(\\d+)-(\\d+)").matcher(rangeHeader);
            if (m.matches()) {
              int from = Integer.parseInt(m.group(1));
              int to = (int) Math.min(Long.parseLong(m.group(2)) + 1, size);
              byte[] part = java.util.Arrays.copyOfRange(b, Math.min(from, b.length), Math.min(to, b.length));
              blobBytesSent.addAndGet(part.length);
              // A truncated blob sends fewer bytes than its Content-Range says, as a failing server would.
              return new MockResponse.Builder().code(206)
                  .setHeader("Content-Range", "bytes " + from + "-" + (to - 1) + "/" + size)
                  .body(new Buffer().write(part)).build();
            }
          }
          blobBytesSent.addAndGet(b.length);
          return new MockResponse.Builder().code(200).body(new Buffer().write(b)).build();
        }
        case "manifests" -> {
          return manifest(method, ref, request);
        }
        case "referrers" -> {
          java.util.concurrent.CountDownLatch tagRead = apiAwaitsTagRead;
          if (tagRead != null) {
            if (!tagRead.await(2, java.util.concurrent.TimeUnit.SECONDS)) {
              apiWaitedInVain.incrementAndGet();
            }
          }
          if (!referrersApi) {
            return code(404);
          }
          ObjectNode index = JSON.createObjectNode();
          index.put("schemaVersion", 2);
          index.put("mediaType", "application/vnd.oci.image.index.v1+json");
          ArrayNode arr = index.putArray("manifests");
          for (byte[] m : referrers.getOrDefault(ref, Map.of()).values()) {
            JsonNode n = JSON.readTree(m);
            ObjectNode d = arr.addObject();
            d.put("mediaType", n.path("mediaType").asText());
            d.put("digest", Digest.sha256(m).toString());
            d.put("size", m.length);
            d.put("artifactType", n.path("artifactType").asText());
            if (n.has("annotations")) {
              d.set("annotations", n.get("annotations"));
            }
          }
          byte[] body = JSON.writeValueAsBytes(index);
          return new MockResponse.Builder().code(200).setHeader("Content-Type",
              "application/vnd.oci.image.index.v1+json").body(new Buffer().write(body)).build();
        }
        default -> {
          return code(404);
        }
      }
    } catch (IOException e) {
      return code(500);
    }
  }

  private MockResponse manifest(String method, String ref, RecordedRequest request)
      throws IOException, InterruptedException {
    switch (method) {
      case "PUT" -> {
        byte[] body = request.getBody().toByteArray();
        String digest = Digest.sha256(body).toString();
        if (ref.startsWith("sha256-")) {
          tagWrites.incrementAndGet();
        }
        manifests.put(ref, body);
        manifests.put(digest, body);
        types.put(ref, request.getHeaders().get("Content-Type"));
        types.put(digest, request.getHeaders().get("Content-Type"));
        JsonNode n = JSON.readTree(body);
        MockResponse.Builder r = new MockResponse.Builder().code(201).setHeader("Docker-Content-Digest", digest);
        if (referrersApi && n.has("subject")) {
          String subject = n.get("subject").get("digest").asText();
          referrers.computeIfAbsent(subject, k -> new ConcurrentHashMap<>()).put(digest, body);
          r.setHeader("OCI-Subject", subject);
        }
        return r.build();
      }
      case "DELETE" -> {
        byte[] gone = manifests.remove(ref);
        referrers.values().forEach(m -> m.remove(ref));
        return code(gone == null ? 404 : 202);
      }
      default -> {
        java.util.concurrent.CountDownLatch tagRead = apiAwaitsTagRead;
        if (ref.startsWith("sha256-") && tagRead != null) {
          tagRead.countDown();
        }
        if (ref.startsWith("sha256-") && tagReadDelayMillis > 0) {
          Thread.sleep(tagReadDelayMillis);
        }
        byte[] m = manifests.get(ref);
        if (m == null) {
          return code(404);
        }
        return new MockResponse.Builder().code(200).setHeader("Content-Type", types.get(ref))
            .body(new Buffer().write(m)).build();
      }
    }
  }

  private static MockResponse code(int code) {
    return new MockResponse.Builder().code(code).build();
  }
}
