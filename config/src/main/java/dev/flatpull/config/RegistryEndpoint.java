package dev.flatpull.config;

import java.net.URI;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * One place that serves a registry host's content: a mirror or the origin server, as described by containerd's
 * {@code hosts.toml}.
 *
 * @param base scheme, host and port, plus a path prefix when {@code overridePath} is set; {@code http} means plain HTTP
 * @param capabilities what this endpoint may be used for
 * @param skipVerify accept any TLS certificate
 * @param headers extra request headers
 * @param overridePath {@code base}'s path replaces {@code /v2} rather than being followed by it
 */
public record RegistryEndpoint(
    URI base, Set<Capability> capabilities, boolean skipVerify, Map<String, List<String>> headers,
    boolean overridePath, List<java.nio.file.Path> ca, List<ClientCertificate> clients) {

  /**
   * A client certificate from {@code hosts.toml}'s {@code client}: PEM files, the key (PKCS#8) in its own file or, when
   * {@code key} is empty, in the certificate's.
   */
  public record ClientCertificate(java.nio.file.Path certificate, java.util.Optional<java.nio.file.Path> key) {}

  /** containerd's host capabilities. */
  public enum Capability {
    PULL,
    RESOLVE,
    PUSH
  }

  public RegistryEndpoint {
    Objects.requireNonNull(base);
    if (!"http".equals(base.getScheme()) && !"https".equals(base.getScheme())) {
      throw new IllegalArgumentException("registry endpoint must be http or https: " + base);
    }
    capabilities = Set.copyOf(capabilities);
    headers = Map.copyOf(headers);
    ca = List.copyOf(ca);
    clients = List.copyOf(clients);
  }

  public RegistryEndpoint(URI base, Set<Capability> capabilities, boolean skipVerify, Map<String, List<String>> headers,
      boolean overridePath) {
    this(base, capabilities, skipVerify, headers, overridePath, List.of(), List.of());
  }

  public static RegistryEndpoint origin(URI base) {
    return new RegistryEndpoint(
        base, Set.of(Capability.PULL, Capability.RESOLVE, Capability.PUSH), false, Map.of(), false);
  }

  public boolean plainHttp() {
    return "http".equals(base.getScheme());
  }

  /** The URL prefix that API paths such as {@code NAME/manifests/REF} follow. */
  public String apiRoot() {
    String b = base.toString();
    while (b.endsWith("/")) {
      b = b.substring(0, b.length() - 1);
    }
    return overridePath ? b : b + "/v2";
  }
}
