package dev.flatpull.fetcher.oci;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.flatpull.core.Digest;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/** Reads and writes manifests and indexes, validating every field flatpull relies on. */
public final class OciDocuments {
  private static final ObjectMapper JSON = new ObjectMapper();

  private OciDocuments() {}

  /**
   * Parses a manifest or index.
   *
   * @param raw the exact bytes served
   * @param contentType the {@code Content-Type} the registry sent, or null; used when the document has no
   *     {@code mediaType} field (allowed by the OCI spec)
   * @throws ManifestFormatException for malformed JSON or fields
   * @throws UnsupportedMediaTypeException for documents other than manifests and indexes
   */
  public static OciDocument parse(byte[] raw, String contentType) throws IOException {
    Digest digest = Digest.sha256(raw);
    JsonNode root;
    try {
      root = JSON.readTree(raw);
    } catch (JsonProcessingException e) {
      throw new ManifestFormatException(
          "manifest " + digest + " is not valid JSON: " + e.getOriginalMessage(), e);
    }
    if (root == null || !root.isObject()) {
      throw new ManifestFormatException("manifest " + digest + " is not a JSON object");
    }
    JsonNode schema = root.get("schemaVersion");
    if (schema == null || !schema.isInt() || schema.asInt() != 2) {
      throw new ManifestFormatException("manifest " + digest + " has schemaVersion " + schema + ", expected 2");
    }
    String mediaType = text(root, "mediaType", digest).orElse(null);
    if (mediaType == null) {
      String ct = contentType == null ? "" : contentType.split(";")[0].trim();
      if (!ct.isEmpty() && !ct.equals("application/json") && !ct.equals("application/octet-stream")) {
        mediaType = ct;
      } else {
        mediaType = root.has("manifests") ? MediaTypes.OCI_INDEX : MediaTypes.OCI_MANIFEST;
      }
    }
    if (MediaTypes.isIndex(mediaType)) {
      List<Descriptor> manifests = descriptors(root, "manifests", digest);
      return new ImageIndex(mediaType, digest, raw, manifests);
    }
    if (MediaTypes.isManifest(mediaType)) {
      JsonNode config = root.get("config");
      if (config == null || !config.isObject()) {
        throw new ManifestFormatException("manifest " + digest + " has no config descriptor");
      }
      JsonNode subject = root.get("subject");
      Optional<Descriptor> subjectDescriptor = subject == null || subject.isNull() ? Optional.empty()
          : Optional.of(descriptor(subject, "subject", digest));
      return new ImageManifest(
          mediaType, digest, raw, descriptor(config, "config", digest), descriptors(root, "layers", digest),
          annotations(root, digest), text(root, "artifactType", digest), subjectDescriptor);
    }
    throw new UnsupportedMediaTypeException("manifest", mediaType);
  }

  private static List<Descriptor> descriptors(JsonNode root, String field, Digest doc) throws IOException {
    JsonNode arr = root.get(field);
    if (arr == null || !arr.isArray()) {
      throw new ManifestFormatException("manifest " + doc + " has no '" + field + "' array");
    }
    List<Descriptor> out = new ArrayList<>();
    for (int i = 0; i < arr.size(); i++) {
      out.add(descriptor(arr.get(i), field + "[" + i + "]", doc));
    }
    return out;
  }

  private static Descriptor descriptor(JsonNode n, String where, Digest doc) throws IOException {
    if (!n.isObject()) {
      throw new ManifestFormatException("manifest " + doc + ": " + where + " is not an object");
    }
    String mediaType =
        text(n, "mediaType", doc)
            .orElseThrow(() -> new ManifestFormatException("manifest " + doc + ": " + where + " has no mediaType"));
    String digestText =
        text(n, "digest", doc)
            .orElseThrow(() -> new ManifestFormatException("manifest " + doc + ": " + where + " has no digest"));
    Digest d;
    try {
      d = Digest.parse(digestText);
    } catch (IllegalArgumentException e) {
      throw new ManifestFormatException("manifest " + doc + ": " + where + ": " + e.getMessage(), e);
    }
    JsonNode size = n.get("size");
    if (size == null || !size.canConvertToLong() || !size.isIntegralNumber() || size.asLong() < 0) {
      throw new ManifestFormatException(
          "manifest " + doc + ": " + where + " has no valid size (found " + size + ")");
    }
    Optional<Platform> platform = Optional.empty();
    JsonNode p = n.get("platform");
    if (p != null && p.isObject()) {
      String os = text(p, "os", doc).orElse("");
      String arch = text(p, "architecture", doc).orElse("");
      platform = Optional.of(new Platform(os, arch, text(p, "variant", doc)));
    }
    return new Descriptor(mediaType, d, size.asLong(), annotations(n, doc), platform, text(n, "artifactType", doc));
  }

  private static Map<String, String> annotations(JsonNode n, Digest doc) throws IOException {
    JsonNode a = n.get("annotations");
    if (a == null || a.isNull()) {
      return Map.of();
    }
    if (!a.isObject()) {
      throw new ManifestFormatException("manifest " + doc + ": annotations is not an object");
    }
    Map<String, String> out = new LinkedHashMap<>();
    for (Map.Entry<String, JsonNode> e : a.properties()) {
      if (!e.getValue().isTextual()) {
        throw new ManifestFormatException("manifest " + doc + ": annotation '" + e.getKey() + "' is not a string");
      }
      out.put(e.getKey(), e.getValue().asText());
    }
    return out;
  }

  private static Optional<String> text(JsonNode n, String field, Digest doc) throws ManifestFormatException {
    JsonNode v = n.get(field);
    if (v == null || v.isNull()) {
      return Optional.empty();
    }
    if (!v.isTextual()) {
      throw new ManifestFormatException("manifest " + doc + ": '" + field + "' is not a string");
    }
    return Optional.of(v.asText());
  }

  /** Serialises an image manifest (OCI or Docker, by {@code mediaType}). The result's digest names it. */
  public static byte[] writeManifest(
      String mediaType, Descriptor config, List<Descriptor> layers, Map<String, String> annotations) {
    ObjectNode root = JSON.createObjectNode();
    root.put("schemaVersion", 2);
    root.put("mediaType", mediaType);
    root.set("config", descriptorJson(config));
    ArrayNode arr = root.putArray("layers");
    layers.forEach(l -> arr.add(descriptorJson(l)));
    if (!annotations.isEmpty()) {
      ObjectNode a = root.putObject("annotations");
      annotations.forEach(a::put);
    }
    try {
      return JSON.writeValueAsBytes(root);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot serialise a manifest", e);
    }
  }

  /** The OCI empty descriptor's content ({@code {}}): the config of an artifact that has none. */
  public static final byte[] EMPTY_JSON = {'{', '}'};

  /** The OCI empty descriptor, for artifacts that have no config. */
  public static Descriptor emptyConfig() {
    return new Descriptor(MediaTypes.OCI_EMPTY, Digest.sha256(EMPTY_JSON), EMPTY_JSON.length, Map.of());
  }

  /**
   * Serialises an OCI 1.1 artifact manifest: an image manifest with {@code artifactType}, the empty config, and a
   * {@code subject} (the manifest it refers to). The result's digest names it.
   */
  public static byte[] writeArtifactManifest(
      String artifactType, List<Descriptor> layers, Descriptor subject, Map<String, String> annotations) {
    ObjectNode root = JSON.createObjectNode();
    root.put("schemaVersion", 2);
    root.put("mediaType", MediaTypes.OCI_MANIFEST);
    root.put("artifactType", artifactType);
    root.set("config", descriptorJson(emptyConfig()));
    ArrayNode arr = root.putArray("layers");
    layers.forEach(l -> arr.add(descriptorJson(l)));
    root.set("subject", descriptorJson(subject));
    if (!annotations.isEmpty()) {
      ObjectNode a = root.putObject("annotations");
      new java.util.TreeMap<>(annotations).forEach(a::put);
    }
    return bytes(root);
  }

  /** Serialises an OCI image index of {@code manifests} (with their artifact types and annotations). */
  public static byte[] writeIndex(List<Descriptor> manifests) {
    ObjectNode root = JSON.createObjectNode();
    root.put("schemaVersion", 2);
    root.put("mediaType", MediaTypes.OCI_INDEX);
    ArrayNode arr = root.putArray("manifests");
    manifests.forEach(m -> arr.add(descriptorJson(m)));
    return bytes(root);
  }

  private static byte[] bytes(ObjectNode root) {
    try {
      return JSON.writeValueAsBytes(root);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot serialise a manifest", e);
    }
  }

  /** Serialises one descriptor as OCI JSON (media type, digest, size, annotations). */
  public static String writeDescriptor(Descriptor d) {
    try {
      return JSON.writeValueAsString(descriptorJson(d));
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot serialise a descriptor", e);
    }
  }

  /** Parses one descriptor written by {@link #writeDescriptor}, with the checks of a manifest's descriptors. */
  public static Descriptor parseDescriptor(String json) throws IOException {
    JsonNode n;
    try {
      n = JSON.readTree(json);
    } catch (JsonProcessingException e) {
      throw new ManifestFormatException("descriptor is not JSON: " + e.getOriginalMessage(), e);
    }
    if (n == null) {
      throw new ManifestFormatException("descriptor is empty");
    }
    return descriptor(n, "descriptor", null);
  }

  private static ObjectNode descriptorJson(Descriptor d) {
    ObjectNode n = JSON.createObjectNode();
    n.put("mediaType", d.mediaType());
    n.put("digest", d.digest().toString());
    n.put("size", d.size());
    d.artifactType().ifPresent(t -> n.put("artifactType", t));
    if (!d.annotations().isEmpty()) {
      ObjectNode a = n.putObject("annotations");
      new java.util.TreeMap<>(d.annotations()).forEach(a::put);
    }
    return n;
  }
}
