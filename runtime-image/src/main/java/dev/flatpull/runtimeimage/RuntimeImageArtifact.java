package dev.flatpull.runtimeimage;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A runtime image as the registry lists it: the descriptor of its artifact manifest in the referrers of the image
 * manifest, and what its annotations say (so that listing costs no request per runtime image). Annotations are
 * read leniently: a referrer of flatpull's artifact type with missing or odd annotations is still listed, with what
 * could be read.
 *
 * @param manifest the artifact manifest's descriptor (a referrers-index entry)
 * @param serviceKey the service-version key, or empty
 * @param created when the runtime image was built, if said
 * @param traceRecorded when its trace was recorded, if said
 * @param derived for a runtime image derived from an older version's (not recorded on this one), what from
 * @param blob the blob's descriptor, where the listing names it ({@link #BLOB}, {@link #SIZE}, {@link #INDEX_END}):
 *     a cold start then reads the blob without the artifact manifest's round trip first
 */
public record RuntimeImageArtifact(Descriptor manifest, String serviceKey, List<String> command, List<String> probes,
    String platform, Optional<Verification> verify, long pages, long size, Optional<Instant> created,
    Optional<Instant> traceRecorded, Optional<Derivation> derived, Optional<Descriptor> blob) {
  /** The OCI {@code artifactType} of runtime images. */
  public static final String ARTIFACT_TYPE = "application/vnd.flatpull.runtime-image.v1";
  /** The media type of the runtime-image blob (the artifact's one layer). */
  public static final String BLOB_MEDIA_TYPE = "application/vnd.flatpull.runtime-image.v1+zstd";
  public static final String SERVICE_KEY = "dev.flatpull.runtime-image.service-key";
  public static final String IMAGE = "dev.flatpull.runtime-image.image";
  public static final String COMMAND = "dev.flatpull.runtime-image.command";
  public static final String PROBES = "dev.flatpull.runtime-image.probes";
  public static final String PLATFORM = "dev.flatpull.runtime-image.platform";
  public static final String VERIFY = "dev.flatpull.runtime-image.verify";
  public static final String PAGES = "dev.flatpull.runtime-image.pages";
  public static final String SIZE = "dev.flatpull.runtime-image.size";
  public static final String TRACE_RECORDED = "dev.flatpull.runtime-image.trace-recorded";
  public static final String FLATPULL_VERSION = "dev.flatpull.version";
  public static final String CREATED = "org.opencontainers.image.created";
  /** On a derived runtime image: the image (reference with digest) whose trace or runtime image it was made from. */
  public static final String DERIVED_FROM = "dev.flatpull.runtime-image.derived-from";
  /** On a derived runtime image: the share of the old trace's bytes the image has, 0 to 1. */
  public static final String DERIVED_OVERLAP = "dev.flatpull.runtime-image.derived-overlap";
  /**
   * On the blob's descriptor, and on the artifact manifest with {@link #BLOB}: the bytes of header and index, so that a
   * loader reads the index in one range.
   */
  public static final String INDEX_END = "dev.flatpull.runtime-image.index-end";
  /**
   * On the artifact manifest (so on its referrers-index entry, which the referrers API and the tag schema both copy
   * from it): the blob's digest. With {@link #SIZE} and {@link #INDEX_END} a loader knows the blob from the listing
   * and skips the artifact manifest. Nothing is trusted for it: the index names the image it was built for, and every
   * extent is verified against that image's TOC, as when the blob is found through the artifact manifest.
   */
  public static final String BLOB = "dev.flatpull.runtime-image.blob";

  private static final ObjectMapper JSON = new ObjectMapper();

  /**
   * Where a derived runtime image came from.
   *
   * @param from the older image, as a reference with its digest
   * @param overlap the share of the old trace's bytes the image has, 0 to 1 (NaN when not said)
   */
  public record Derivation(String from, double overlap) {
    /** The annotations that say so. */
    public Map<String, String> annotations() {
      return Map.of(DERIVED_FROM, from, DERIVED_OVERLAP, String.format(java.util.Locale.ROOT, "%.4f", overlap));
    }
  }

  /**
   * The annotations a runtime image's artifact manifest (and its referrers-index entry) carries, its blob's among
   * them.
   */
  public static Map<String, String> annotations(RuntimeImageIndex index, Descriptor blob) {
    Map<String, String> a = annotations(index, blob.size());
    a.put(BLOB, blob.digest().toString());
    Optional.ofNullable(blob.annotations().get(INDEX_END)).ifPresent(end -> a.put(INDEX_END, end));
    return a;
  }

  /** The annotations above but the blob's digest and index end. */
  static Map<String, String> annotations(RuntimeImageIndex index, long blobSize) {
    Map<String, String> a = new LinkedHashMap<>();
    a.put(SERVICE_KEY, index.service().key());
    a.put(IMAGE, index.service().image());
    a.put(COMMAND, json(index.service().command()));
    a.put(PROBES, json(index.service().probes()));
    a.put(PLATFORM, index.service().platform());
    a.put(VERIFY, index.verify().key());
    a.put(PAGES, Long.toString(index.trace().pages()));
    a.put(SIZE, Long.toString(blobSize));
    a.put(TRACE_RECORDED, index.trace().recordedAt().toString());
    a.put(FLATPULL_VERSION, index.flatpullVersion());
    a.put(CREATED, index.createdAt().toString());
    return a;
  }

  /** What the annotations of a referrers-index entry say. */
  public static RuntimeImageArtifact of(Descriptor manifest) {
    Map<String, String> a = manifest.annotations();
    Optional<Verification> verify;
    try {
      verify = Optional.ofNullable(a.get(VERIFY)).map(Verification::of);
    } catch (IllegalArgumentException e) {
      verify = Optional.empty();
    }
    return new RuntimeImageArtifact(manifest, a.getOrDefault(SERVICE_KEY, ""), list(a.get(COMMAND)),
        list(a.get(PROBES)), a.getOrDefault(PLATFORM, ""), verify, number(a.get(PAGES)), number(a.get(SIZE)),
        instant(a.get(CREATED)), instant(a.get(TRACE_RECORDED)),
        Optional.ofNullable(a.get(DERIVED_FROM)).map(from -> new Derivation(from, share(a.get(DERIVED_OVERLAP)))),
        blob(a));
  }

  /** The blob the annotations name, if they name one with its size and where its index ends. */
  private static Optional<Descriptor> blob(Map<String, String> a) {
    long size = number(a.get(SIZE));
    long indexEnd = number(a.get(INDEX_END));
    if (a.get(BLOB) == null || size <= 0 || indexEnd <= 0 || indexEnd > size) {
      return Optional.empty();
    }
    try {
      return Optional.of(new Descriptor(BLOB_MEDIA_TYPE, Digest.parse(a.get(BLOB)), size,
          Map.of(INDEX_END, Long.toString(indexEnd))));
    } catch (IllegalArgumentException e) {
      return Optional.empty();
    }
  }

  public Digest digest() {
    return manifest.digest();
  }

  private static String json(List<String> values) {
    try {
      return JSON.writeValueAsString(values);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  private static List<String> list(String json) {
    if (json == null) {
      return List.of();
    }
    try {
      return List.copyOf(JSON.readValue(json, new TypeReference<List<String>>() {}));
    } catch (JsonProcessingException | NullPointerException e) {
      return List.of("?");
    }
  }

  private static long number(String s) {
    try {
      return s == null ? -1 : Long.parseLong(s);
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  private static double share(String s) {
    try {
      return s == null ? Double.NaN : Double.parseDouble(s);
    } catch (NumberFormatException e) {
      return Double.NaN;
    }
  }

  private static Optional<Instant> instant(String s) {
    try {
      return s == null ? Optional.empty() : Optional.of(Instant.parse(s));
    } catch (DateTimeParseException e) {
      return Optional.empty();
    }
  }
}
