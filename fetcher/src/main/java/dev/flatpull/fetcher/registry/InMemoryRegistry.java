package dev.flatpull.fetcher.registry;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.UnaryOperator;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The OCI distribution API answered from memory, apart from any HTTP server: manifests by tag and digest, blobs with
 * single byte ranges, monolithic uploads, and, when asked for, the referrers API of distribution 1.1 (without it, it
 * answers as distribution 2.8 does: 404). The warm-up's loopback registry and the tests' fake registry both answer
 * with it, so that there is one reading of the API's paths.
 *
 * <p>All repositories share one namespace (a tag names the same manifest in each): enough for the warm-up's one image
 * and for tests, and no registry to serve a node.
 */
public final class InMemoryRegistry {
  /** An HTTP answer: status, headers (no Content-Length: the server counts the body) and body. */
  public record Answer(int status, Map<String, String> headers, byte[] body) {
    static Answer of(int status) {
      return new Answer(status, Map.of(), new byte[0]);
    }
  }

  private record Stored(String mediaType, byte[] bytes) {}

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Pattern RANGE = Pattern.compile("bytes=(\\d+)-(\\d*)");

  private final boolean referrersApi;
  private final UnaryOperator<byte[]> served;
  private final Map<String, byte[]> blobs = new ConcurrentHashMap<>();
  private final Map<String, Stored> manifests = new ConcurrentHashMap<>();
  /** Referrer manifests by subject digest, then by their own digest (the API's index). */
  private final Map<String, Map<String, byte[]>> referrers = new ConcurrentHashMap<>();

  /**
   * @param referrersApi whether {@code /referrers/} answers and a pushed manifest's subject is acknowledged
   * @param served what a GET sends of a blob's bytes (identity; a test's fault otherwise): ranges are cut from it,
   *     while the size a range answer gives stays the stored blob's
   */
  public InMemoryRegistry(boolean referrersApi, UnaryOperator<byte[]> served) {
    this.referrersApi = referrersApi;
    this.served = served;
  }

  /** A registry without the referrers API that serves what it holds. */
  public InMemoryRegistry() {
    this(false, b -> b);
  }

  public Digest putBlob(byte[] bytes) {
    Digest d = Digest.sha256(bytes);
    blobs.put(d.toString(), bytes);
    return d;
  }

  /** Stores a manifest under {@code tag} (when not null) and under its digest, as a push of it would. */
  public Digest putManifest(String tag, String mediaType, byte[] bytes) {
    Digest d = Digest.sha256(bytes);
    Stored s = new Stored(mediaType, bytes);
    manifests.put(d.toString(), s);
    if (tag != null) {
      manifests.put(tag, s);
    }
    subject(bytes).ifPresent(subject ->
        referrers.computeIfAbsent(subject, k -> new ConcurrentHashMap<>()).put(d.toString(), bytes));
    return d;
  }

  /** The manifest a tag or digest names, as stored. */
  public Optional<byte[]> manifest(String reference) {
    return Optional.ofNullable(manifests.get(reference)).map(Stored::bytes);
  }

  /**
   * The answer to one request.
   *
   * @param path the request's path, {@code /v2/...}
   * @param digestQuery the {@code digest} query parameter (of an upload's PUT), or null
   * @param range the {@code Range} header, or null
   * @param contentType the {@code Content-Type} header, or null
   * @param body the request's body (empty for none)
   */
  public Answer answer(String method, String path, String digestQuery, String range, String contentType,
      byte[] body) {
    if (path.equals("/v2/") || path.equals("/v2")) {
      return json(200, "{}");
    }
    if (path.contains("/blobs/uploads/")) {
      return upload(method, path, digestQuery, body);
    }
    String[] parts = path.split("/");
    if (parts.length < 5 || !parts[1].equals("v2")) {
      return error(404, "NAME_UNKNOWN");
    }
    String kind = parts[parts.length - 2];
    String ref = parts[parts.length - 1];
    return switch (kind) {
      case "blobs" -> blob(method, ref, range);
      case "manifests" -> manifest(method, ref, contentType, body);
      case "referrers" -> referrersOf(ref);
      default -> error(404, "UNSUPPORTED");
    };
  }

  private Answer upload(String method, String path, String digest, byte[] body) {
    if (method.equals("POST")) {
      return new Answer(202, Map.of("Location", path + UUID.randomUUID()), new byte[0]);
    }
    if (!method.equals("PUT") || digest == null) {
      return error(400, "UNSUPPORTED");
    }
    if (!Digest.sha256(body).toString().equals(digest)) {
      return error(400, "DIGEST_INVALID");
    }
    blobs.put(digest, body);
    return new Answer(201, Map.of("Docker-Content-Digest", digest), new byte[0]);
  }

  private Answer blob(String method, String digest, String range) {
    byte[] stored = blobs.get(digest);
    if (stored == null) {
      return error(404, "BLOB_UNKNOWN");
    }
    Map<String, String> headers = new LinkedHashMap<>();
    headers.put("Content-Type", "application/octet-stream");
    headers.put("Docker-Content-Digest", digest);
    if (method.equals("HEAD")) {
      headers.put("Content-Length", Integer.toString(stored.length));
      return new Answer(200, headers, new byte[0]);
    }
    byte[] b = served.apply(stored);
    Matcher m = range == null ? null : RANGE.matcher(range);
    if (m == null || !m.matches()) {
      return new Answer(200, headers, b);
    }
    long size = stored.length;
    long from = Long.parseLong(m.group(1));
    long to = m.group(2).isEmpty() ? size : Math.min(Long.parseLong(m.group(2)) + 1, size);
    if (from >= size || from >= to) {
      headers.put("Content-Range", "bytes */" + size);
      return new Answer(416, headers, new byte[0]);
    }
    // A blob cut short by `served` sends fewer bytes than its Content-Range says, as a failing server would.
    byte[] part = Arrays.copyOfRange(b, (int) Math.min(from, b.length), (int) Math.min(to, b.length));
    headers.put("Content-Range", "bytes " + from + "-" + (to - 1) + "/" + size);
    return new Answer(206, headers, part);
  }

  private Answer manifest(String method, String ref, String contentType, byte[] body) {
    switch (method) {
      case "PUT" -> {
        String tag = ref.startsWith("sha256:") ? null : ref;
        Digest d = putManifest(tag, contentType == null ? MediaTypes.OCI_MANIFEST : contentType, body);
        Map<String, String> headers = new LinkedHashMap<>();
        headers.put("Docker-Content-Digest", d.toString());
        if (referrersApi) {
          subject(body).ifPresent(subject -> headers.put("OCI-Subject", subject));
        }
        return new Answer(201, headers, new byte[0]);
      }
      case "DELETE" -> {
        Stored gone = manifests.remove(ref);
        if (gone != null && ref.startsWith("sha256:")) {
          // A manifest deleted by digest takes its tags with it, as in distribution.
          manifests.values().removeIf(s -> Arrays.equals(s.bytes(), gone.bytes()));
        }
        referrers.values().forEach(m -> m.remove(ref));
        return gone == null ? error(404, "MANIFEST_UNKNOWN") : Answer.of(202);
      }
      default -> {
        Stored s = manifests.get(ref);
        if (s == null) {
          return error(404, "MANIFEST_UNKNOWN");
        }
        Map<String, String> headers = Map.of("Content-Type", s.mediaType(), "Docker-Content-Digest",
            Digest.sha256(s.bytes()).toString());
        return new Answer(200, headers, method.equals("HEAD") ? new byte[0] : s.bytes());
      }
    }
  }

  private Answer referrersOf(String subject) {
    if (!referrersApi) {
      return error(404, "UNSUPPORTED");
    }
    ObjectNode index = JSON.createObjectNode();
    index.put("schemaVersion", 2);
    index.put("mediaType", MediaTypes.OCI_INDEX);
    ArrayNode arr = index.putArray("manifests");
    try {
      for (Map.Entry<String, byte[]> e : referrers.getOrDefault(subject, Map.of()).entrySet()) {
        JsonNode n = JSON.readTree(e.getValue());
        ObjectNode d = arr.addObject();
        d.put("mediaType", n.path("mediaType").asText());
        d.put("digest", e.getKey());
        d.put("size", e.getValue().length);
        d.put("artifactType", n.path("artifactType").asText());
        if (n.has("annotations")) {
          d.set("annotations", n.get("annotations"));
        }
      }
      return new Answer(200, Map.of("Content-Type", MediaTypes.OCI_INDEX), JSON.writeValueAsBytes(index));
    } catch (IOException e) {
      return error(500, "UNKNOWN"); // a stored referrer that is not JSON: only a test stores one
    }
  }

  /** The digest of the manifest's subject, if it is JSON with one. */
  private static Optional<String> subject(byte[] manifest) {
    try {
      JsonNode n = JSON.readTree(manifest);
      return n != null && n.has("subject") ? Optional.of(n.get("subject").path("digest").asText())
          : Optional.empty();
    } catch (IOException e) {
      return Optional.empty();
    }
  }

  private static Answer error(int status, String code) {
    return json(status, "{\"errors\":[{\"code\":\"" + code + "\"}]}");
  }

  private static Answer json(int status, String body) {
    return new Answer(status, Map.of("Content-Type", "application/json"), body.getBytes(StandardCharsets.UTF_8));
  }
}
