package dev.flatpull.config;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;

/**
 * Registry credentials read from a docker {@code config.json} ({@code auths} only; credential helpers are not run).
 * Keys may be bare hosts ({@code ghcr.io}), URLs ({@code https://ghcr.io/v1/}), or docker's legacy
 * {@code https://index.docker.io/v1/} for Docker Hub.
 */
public final class RegistryCredentials {
  public static final RegistryCredentials NONE = new RegistryCredentials(Map.of());

  private final Map<String, RegistryCredential> byHost;

  private RegistryCredentials(Map<String, RegistryCredential> byHost) {
    this.byHost = Map.copyOf(byHost);
  }

  public static RegistryCredentials of(Map<String, RegistryCredential> byHost) {
    return new RegistryCredentials(byHost);
  }

  /** Reads {@code file}; a missing file means no credentials, a malformed one is an error naming the key. */
  public static RegistryCredentials load(Path file) throws ConfigException {
    if (!Files.exists(file)) {
      return NONE;
    }
    String name = file.toString();
    JsonNode root;
    try {
      root = new ObjectMapper().readTree(Files.readString(file));
    } catch (IOException e) {
      throw new ConfigException(name, "", "is not valid JSON: " + e.getMessage().lines().findFirst().orElse(""), e);
    }
    JsonNode auths = root == null ? null : root.get("auths");
    if (auths == null || auths.isNull()) {
      return NONE;
    }
    if (!auths.isObject()) {
      throw new ConfigException(name, "auths", "must be an object");
    }
    Map<String, RegistryCredential> out = new LinkedHashMap<>();
    for (Map.Entry<String, JsonNode> e : auths.properties()) {
      out.put(normaliseHost(e.getKey()), credential(name, "auths." + e.getKey(), e.getValue()));
    }
    return new RegistryCredentials(out);
  }

  private static RegistryCredential credential(String file, String key, JsonNode n) throws ConfigException {
    if (!n.isObject()) {
      throw new ConfigException(file, key, "must be an object");
    }
    Optional<String> user = text(n, "username");
    Optional<String> pass = text(n, "password");
    Optional<String> auth = text(n, "auth");
    if (auth.isPresent()) {
      String decoded;
      try {
        decoded = new String(Base64.getDecoder().decode(auth.get().trim()), StandardCharsets.UTF_8);
      } catch (IllegalArgumentException ex) {
        throw new ConfigException(file, key + ".auth", "is not valid base64", ex);
      }
      int colon = decoded.indexOf(':');
      if (colon < 0) {
        throw new ConfigException(file, key + ".auth", "must decode to USER:PASSWORD");
      }
      user = Optional.of(decoded.substring(0, colon));
      pass = Optional.of(decoded.substring(colon + 1));
    }
    return new RegistryCredential(user, pass, text(n, "identitytoken"), text(n, "registrytoken"));
  }

  private static Optional<String> text(JsonNode n, String field) {
    JsonNode v = n.get(field);
    return v == null || !v.isTextual() || v.asText().isEmpty() ? Optional.empty() : Optional.of(v.asText());
  }

  static String normaliseHost(String key) {
    String h = key;
    int scheme = h.indexOf("://");
    if (scheme >= 0) {
      h = h.substring(scheme + 3);
    }
    int slash = h.indexOf('/');
    if (slash >= 0) {
      h = h.substring(0, slash);
    }
    if (h.equals("index.docker.io") || h.equals("registry-1.docker.io")) {
      h = "docker.io";
    }
    return h;
  }

  /** The credential for a registry host (as in an image reference, e.g. {@code docker.io}, {@code 127.0.0.1:5000}). */
  public Optional<RegistryCredential> forHost(String host) {
    return Optional.ofNullable(byHost.get(normaliseHost(host)));
  }
}
