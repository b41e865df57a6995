package dev.flatpull.fetcher.registry;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.RegistryEndpoint;
import dev.flatpull.config.RegistryEndpoint.Capability;
import dev.flatpull.core.BoundedInputStream;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageIndex;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.ManifestFormatException;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocument;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import okhttp3.MediaType;
import okhttp3.RequestBody;

/**
 * A client for one repository of one registry, implementing the parts of the OCI distribution spec flatpull needs:
 * resolving references, fetching manifests and blobs (verified), range reads of blobs, and pushing. Thread-safe;
 * obtained from {@link RegistryClients}.
 */
public final class RegistryClient {
  private static final Pattern CONTENT_RANGE = Pattern.compile("bytes (\\d+)-(\\d+)/(\\d+|\\*)");
  private static final MediaType OCTETS = MediaType.parse("application/octet-stream");

  private final RegistryHttp http;
  private final String registry;
  private final String repository;
  private final FetchLimits limits;

  RegistryClient(RegistryHttp http, String registry, String repository, FetchLimits limits) {
    this.http = http;
    this.registry = registry;
    this.repository = repository;
    this.limits = limits;
  }

  public String registry() {
    return registry;
  }

  public String repository() {
    return repository;
  }

  /** An image resolved to one platform's manifest. {@code indexDigest} is set when the reference named an index. */
  public record ResolvedImage(ImageReference reference, ImageManifest manifest, java.util.Optional<Digest> indexDigest) {}

  /**
   * Resolves a reference to the manifest for {@code platform}, following an index if the reference names one.
   *
   * @throws RegistryNotFoundException when the reference or the platform's manifest does not exist
   */
  public ResolvedImage resolve(ImageReference reference, Platform platform) throws IOException {
    OciDocument doc = fetchManifest(reference.manifestReference());
    if (doc instanceof ImageManifest m) {
      return new ResolvedImage(reference, m, java.util.Optional.empty());
    }
    ImageIndex index = (ImageIndex) doc;
    Descriptor chosen =
        index.select(platform)
            .orElseThrow(
                () -> new RegistryNotFoundException(
                    "image index " + index.digest() + " has no manifest for platform " + platform, reference.toString(),
                    0, null));
    OciDocument inner = fetchManifest(chosen.digest().toString());
    if (!(inner instanceof ImageManifest m)) {
      throw new ManifestFormatException("index " + index.digest() + " entry " + chosen.digest() + " is not a manifest");
    }
    return new ResolvedImage(reference, m, java.util.Optional.of(index.digest()));
  }

  /**
   * Fetches and parses a manifest or index by tag or digest. When {@code reference} is a digest, the bytes are
   * verified against it.
   */
  public OciDocument fetchManifest(String reference) throws IOException {
    RegistryHttp.Call call =
        call(RequestKind.MANIFEST, reference.contains(":") ? Capability.PULL : Capability.RESOLVE, "GET",
            "/" + repository + "/manifests/" + reference, Map.of("Accept", String.join(", ", MediaTypes.MANIFEST_ACCEPT)),
            null, false);
    return http.execute(registry, call, (response, body) -> {
      byte[] raw = readAll(body, limits.maxManifestBytes(), "manifest " + reference);
      if (reference.contains(":")) {
        Digest.parse(reference).verify("manifest " + reference, raw, 0, raw.length);
      }
      return OciDocuments.parse(raw, response.header("Content-Type"));
    });
  }

  /** Fetches a small blob (an image config) whole into memory, verified against its descriptor. */
  public byte[] fetchBlob(Descriptor descriptor) throws IOException {
    if (descriptor.size() > limits.maxManifestBytes()) {
      throw new SizeLimitExceededException("blob " + descriptor.digest(), limits.maxManifestBytes());
    }
    RegistryHttp.Call call = call(RequestKind.BLOB, Capability.PULL, "GET", blobPath(descriptor.digest()), Map.of(), null, false);
    return http.execute(registry, call, (response, body) -> {
      byte[] raw = readAll(body, descriptor.size(), "blob " + descriptor.digest());
      if (raw.length != descriptor.size()) {
        throw new java.io.EOFException("blob " + descriptor.digest() + " ended after " + raw.length + " of "
            + descriptor.size() + " bytes");
      }
      descriptor.digest().verify("blob", raw, 0, raw.length);
      return raw;
    });
  }

  /**
   * Downloads a whole blob to {@code target}, verifying size and digest while streaming; the file appears only when
   * verified (written to a temporary file beside it, then moved). A truncated or reset transfer is retried.
   */
  public void downloadBlob(Descriptor descriptor, Path target) throws IOException {
    downloadBlob(descriptor, target, n -> {});
  }

  /** The same, telling {@code received} the bytes received so far after each read (again from 0 on a retry). */
  public void downloadBlob(Descriptor descriptor, Path target, java.util.function.LongConsumer received)
      throws IOException {
    if (descriptor.size() > limits.maxLayerBytes()) {
      throw new SizeLimitExceededException("blob " + descriptor.digest(), limits.maxLayerBytes());
    }
    Path tmp = target.resolveSibling(target.getFileName() + ".partial");
    RegistryHttp.Call call = call(RequestKind.BLOB, Capability.PULL, "GET", blobPath(descriptor.digest()), Map.of(), null, false);
    try {
      http.execute(registry, call, (response, body) -> {
        MessageDigest md = descriptor.digest().newMessageDigest();
        long n = 0;
        try (OutputStream out = Files.newOutputStream(tmp)) {
          byte[] buf = new byte[64 * 1024];
          int r;
          while ((r = body.read(buf)) > 0) {
            n += r;
            if (n > descriptor.size()) {
              throw new DigestMismatchException(
                  "blob longer than its descriptor's " + descriptor.size() + " bytes", descriptor.digest(),
                  descriptor.digest());
            }
            md.update(buf, 0, r);
            out.write(buf, 0, r);
            received.accept(n);
          }
        }
        if (n != descriptor.size()) {
          throw new java.io.EOFException(
              "blob " + descriptor.digest() + " ended after " + n + " of " + descriptor.size() + " bytes");
        }
        Digest actual = Digest.of(descriptor.digest().algorithm(), md);
        if (!actual.equals(descriptor.digest())) {
          throw new DigestMismatchException("blob", descriptor.digest(), actual);
        }
        return null;
      });
      Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    } finally {
      Files.deleteIfExists(tmp);
    }
  }

  /**
   * Reads {@code range} of a blob. Bytes are not verified here (a range has no digest of its own): callers verify the
   * chunks they extract. A mirror that ignores {@code Range} and sends the whole blob (200, as a pull-through cache does
   * for a blob it does not hold yet) is left for the next endpoint when the range starts far into the blob; the last
   * endpoint's, or one near the blob's start, is read through to the range. A 206 whose {@code Content-Range} does not match the request is a {@link RegistryProtocolException}.
   */
  public byte[] readRange(Digest blob, ByteRange range) throws IOException {
    if (range.isEmpty()) {
      return new byte[0];
    }
    if (range.length() > Integer.MAX_VALUE - 8) {
      throw new SizeLimitExceededException("range " + range + " of blob " + blob, Integer.MAX_VALUE - 8);
    }
    return streamRange(blob, range, body -> {
      byte[] out = body.readNBytes((int) range.length());
      if (out.length != range.length()) {
        throw new java.io.EOFException(
            "range " + range + " of blob " + blob + " truncated after " + out.length + " bytes");
      }
      return out;
    });
  }

  /** Reads a range's bytes as they arrive. */
  @FunctionalInterface
  public interface RangeReader<T> {
    /**
     * @param body the range's bytes from its first (read no more than the range's length); it may end early (a truncated response), which the reader
     *     reports by throwing {@link java.io.EOFException}
     */
    T read(InputStream body) throws IOException;
  }

  /**
   * Reads {@code range} of a blob as it arrives, for a consumer that must not wait for all of it (a runtime-image
   * stream). The same checks as {@link #readRange}; on a transport failure (reset, truncation) the request is retried
   * and {@code reader} called again from the range's start, so it must be able to start over. Bytes are not verified
   * here.
   */
  public <T> T streamRange(Digest blob, ByteRange range, RangeReader<T> reader) throws IOException {
    RegistryHttp.Call call =
        new RegistryHttp.Call(RequestKind.BLOB_RANGE, Capability.PULL, "GET", blobPath(blob),
            Map.of("Range", range.httpRangeHeader()), null, repository, false, range);
    return http.execute(registry, call, (response, body) -> {
      long skip = 0;
      if (response.code() == 206) {
        String cr = response.header("Content-Range");
        Matcher m = cr == null ? null : CONTENT_RANGE.matcher(cr.trim());
        if (m == null || !m.matches()) {
          throw new RegistryProtocolException(
              "206 with missing or malformed Content-Range '" + cr + "' for " + range.httpRangeHeader(),
              blobPath(blob), 206, null);
        }
        long first = Long.parseLong(m.group(1));
        long last = Long.parseLong(m.group(2));
        if (first != range.offset() || last != range.end() - 1) {
          throw new RegistryProtocolException(
              "asked for " + range.httpRangeHeader() + " but got Content-Range '" + cr + "'", blobPath(blob), 206, null);
        }
      } else if (response.code() == 200) {
        skip = range.offset();
      } else {
        throw new RegistryProtocolException("unexpected status for a range read", blobPath(blob), response.code(), null);
      }
      skipFully(body, skip);
      // Readers take exactly the range's length: after it comes the rest of a blob a 200 sent whole.
      return reader.read(body);
    });
  }

  private static void skipFully(InputStream in, long n) throws IOException {
    long left = n;
    while (left > 0) {
      long s = in.skip(left);
      if (s <= 0) {
        if (in.read() < 0) {
          throw new java.io.EOFException("blob ended while skipping to the requested range");
        }
        s = 1;
      }
      left -= s;
    }
  }

  // --- push ---

  /** Whether the repository already has a blob (HEAD). */
  public boolean hasBlob(Digest digest) throws IOException {
    RegistryHttp.Call call = call(RequestKind.PUSH, Capability.PULL, "HEAD", blobPath(digest), Map.of(), null, true);
    try {
      return http.execute(registry, call, (response, body) -> true);
    } catch (RegistryNotFoundException e) {
      return false;
    }
  }

  /** Uploads a blob from a file (monolithic POST then PUT) unless the repository already has it. */
  public void pushBlob(Descriptor descriptor, Path file) throws IOException {
    pushBlob(descriptor, RequestBody.create(file.toFile(), OCTETS));
  }

  /** Uploads a blob held in memory unless the repository already has it. */
  public void pushBlob(Descriptor descriptor, byte[] bytes) throws IOException {
    pushBlob(descriptor, RequestBody.create(bytes, OCTETS));
  }

  private void pushBlob(Descriptor descriptor, RequestBody content) throws IOException {
    if (hasBlob(descriptor.digest())) {
      return;
    }
    RegistryEndpoint endpoint = http.primaryEndpoint(registry, Capability.PUSH);
    RegistryHttp.Call start =
        call(RequestKind.PUSH, Capability.PUSH, "POST", "/" + repository + "/blobs/uploads/", Map.of(),
            RequestBody.create(new byte[0], null), true);
    String location = http.executeOn(endpoint, start, (response, body) -> {
      String loc = response.header("Location");
      if (loc == null) {
        throw new RegistryProtocolException("upload start without Location", start.path(), response.code(), null);
      }
      return response.request().url().resolve(loc).toString();
    });
    String put = location + (location.contains("?") ? "&" : "?") + "digest=" + descriptor.digest();
    RegistryHttp.Call finish =
        call(RequestKind.PUSH, Capability.PUSH, "PUT", put, Map.of("Content-Type", "application/octet-stream"),
            content, true);
    http.executeOn(endpoint, finish, (response, body) -> null);
  }

  /** Pushes a manifest or index under {@code reference} (a tag or its digest); returns the digest of {@code bytes}. */
  public Digest pushManifest(String reference, String mediaType, byte[] bytes) throws IOException {
    RegistryHttp.Call call =
        call(RequestKind.PUSH, Capability.PUSH, "PUT", "/" + repository + "/manifests/" + reference,
            Map.of("Content-Type", mediaType), RequestBody.create(bytes, MediaType.parse(mediaType)), true);
    http.execute(registry, call, (response, body) -> null);
    return Digest.sha256(bytes);
  }

  /**
   * Pushes a manifest that has a {@code subject} under its own digest, and says whether the registry indexed the
   * subject itself (it answered {@code OCI-Subject}, so it serves the referrers API); when not, the client must
   * maintain the referrers tag schema (OCI distribution spec 1.1, "Pushing Manifests with Subject").
   */
  public boolean pushReferrerManifest(String mediaType, byte[] bytes) throws IOException {
    Digest digest = Digest.sha256(bytes);
    RegistryHttp.Call call =
        call(RequestKind.PUSH, Capability.PUSH, "PUT", "/" + repository + "/manifests/" + digest,
            Map.of("Content-Type", mediaType), RequestBody.create(bytes, MediaType.parse(mediaType)), true);
    return http.execute(registry, call, (response, body) -> response.header("OCI-Subject") != null);
  }

  /**
   * The referrers of {@code subject} from the referrers API, or empty when the registry does not serve it (404, as
   * registries before OCI distribution 1.1 answer): then the referrers tag schema is the place to look.
   */
  public java.util.Optional<ImageIndex> referrersApi(Digest subject) throws IOException {
    RegistryHttp.Call call =
        call(RequestKind.REFERRERS, Capability.PULL, "GET", "/" + repository + "/referrers/" + subject,
            Map.of("Accept", MediaTypes.OCI_INDEX), null, false);
    try {
      return http.execute(registry, call, (response, body) -> {
        byte[] raw = readAll(body, limits.maxManifestBytes(), "referrers of " + subject);
        if (!(OciDocuments.parse(raw, MediaTypes.OCI_INDEX) instanceof ImageIndex index)) {
          throw new ManifestFormatException("the referrers API answered with something other than an index");
        }
        return java.util.Optional.of(index);
      });
    } catch (RegistryNotFoundException e) {
      return java.util.Optional.empty();
    }
  }

  /** At most this many tags are asked for in one listing ({@link #listTags}). */
  public static final int TAGS_PAGE = 1000;

  /**
   * The repository's tags, as its first listing page gives them ({@value #TAGS_PAGE} at most, in the registry's order:
   * lexical for distribution), or empty when the registry does not list them (404).
   */
  public java.util.List<String> listTags() throws IOException {
    RegistryHttp.Call call = call(RequestKind.TAGS, Capability.PULL, "GET", "/" + repository + "/tags/list?n="
        + TAGS_PAGE, Map.of("Accept", "application/json"), null, false);
    try {
      return http.execute(registry, call, (response, body) -> {
        byte[] raw = readAll(body, limits.maxManifestBytes(), "tags of " + repository);
        com.fasterxml.jackson.databind.JsonNode tags;
        try {
          tags = new com.fasterxml.jackson.databind.ObjectMapper().readTree(raw).path("tags");
        } catch (IOException e) {
          throw new ManifestFormatException("the tag listing of " + repository + " is not JSON: " + e.getMessage());
        }
        java.util.List<String> out = new java.util.ArrayList<>();
        tags.forEach(t -> {
          if (t.isTextual()) {
            out.add(t.asText());
          }
        });
        return out;
      });
    } catch (RegistryNotFoundException e) {
      return java.util.List.of();
    }
  }

  /**
   * Deletes a manifest by digest. Returns false when the registry does not allow deletion (405, its default) or
   * does not have it: deletion is housekeeping, never required for correctness.
   */
  public boolean deleteManifest(Digest digest) throws IOException {
    RegistryHttp.Call call =
        call(RequestKind.PUSH, Capability.PUSH, "DELETE", "/" + repository + "/manifests/" + digest, Map.of(), null,
            true);
    try {
      return http.execute(registry, call, (response, body) -> true);
    } catch (RegistryNotFoundException e) {
      return false;
    } catch (RegistryProtocolException e) {
      if (e.status() == 405 || e.status() == 400) {
        return false;
      }
      throw e;
    }
  }

  private String blobPath(Digest d) {
    return "/" + repository + "/blobs/" + d;
  }

  private RegistryHttp.Call call(
      RequestKind kind, Capability cap, String method, String path, Map<String, String> headers, RequestBody body,
      boolean push) {
    return new RegistryHttp.Call(kind, cap, method, path, headers, body, repository, push, null);
  }

  static byte[] readAll(InputStream in, long limit, String subject) throws IOException {
    try (InputStream bounded = new BoundedInputStream(in, subject, limit)) {
      return bounded.readAllBytes();
    }
  }
}
