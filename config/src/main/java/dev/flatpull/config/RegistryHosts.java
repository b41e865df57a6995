package dev.flatpull.config;

import dev.flatpull.config.RegistryEndpoint.Capability;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * Resolves a registry host name to its endpoints following containerd's {@code hosts.toml} convention: the file
 * {@code CONFIG_PATH/HOST[:PORT]/hosts.toml} (else {@code CONFIG_PATH/_default/hosts.toml}) lists mirrors as
 * {@code [host."URL"]} tables, tried in file order, before the {@code server}. Without a file the origin is
 * {@code https://HOST} ({@code registry-1.docker.io} for {@code docker.io}), or {@code http://} when plain HTTP is set.
 */
public final class RegistryHosts {
  private final Optional<Path> configPath;
  private final boolean plainHttp;

  public RegistryHosts(Optional<Path> configPath, boolean plainHttp) {
    this.configPath = configPath;
    this.plainHttp = plainHttp;
  }

  /** The endpoints of {@code host}, mirrors first, the origin server last. Never empty. */
  public List<RegistryEndpoint> endpoints(String host) throws ConfigException {
    Optional<Path> file = hostsFile(host);
    URI defaultServer = defaultServer(host);
    if (file.isEmpty()) {
      return List.of(RegistryEndpoint.origin(defaultServer));
    }
    TomlTable top = TomlTable.parse(file.get());
    List<RegistryEndpoint> out = new ArrayList<>();
    for (Map.Entry<String, TomlTable> e : top.subTables("host").entrySet()) {
      out.add(endpoint(e.getValue(), uri(top, "host." + e.getKey(), e.getKey()), true, file.get().getParent()));
    }
    URI server = top.has("server") ? uri(top, "server", top.string("server", "")) : defaultServer;
    out.add(endpoint(top, server, false, file.get().getParent()));
    top.rejectUnknownKeys();
    return List.copyOf(out);
  }

  private URI defaultServer(String host) {
    String h = "docker.io".equals(host) ? "registry-1.docker.io" : host;
    return URI.create((plainHttp ? "http://" : "https://") + h);
  }

  private Optional<Path> hostsFile(String host) {
    if (configPath.isEmpty()) {
      return Optional.empty();
    }
    for (String dir : List.of(host, "_default")) {
      Path p = configPath.get().resolve(dir).resolve("hosts.toml");
      if (Files.isRegularFile(p)) {
        return Optional.of(p);
      }
    }
    return Optional.empty();
  }

  /**
   * @param ownTable whether {@code t} holds this endpoint only (a {@code [host."URL"]} table), so that any other key in
   *     it is a typo; the top-level table is checked by the caller, as it also holds {@code server} and {@code host}
   */
  private static RegistryEndpoint endpoint(TomlTable t, URI base, boolean ownTable, Path dir) throws ConfigException {
    Set<Capability> caps = EnumSet.noneOf(Capability.class);
    for (String c : t.strings("capabilities", List.of("pull", "resolve", "push"))) {
      switch (c) {
        case "pull" -> caps.add(Capability.PULL);
        case "resolve" -> caps.add(Capability.RESOLVE);
        case "push" -> caps.add(Capability.PUSH);
        default -> throw t.invalid("capabilities", "unknown capability '" + c + "' (pull, resolve, push)");
      }
    }
    boolean skipVerify = t.bool("skip_verify", false);
    boolean overridePath = t.bool("override_path", false);
    Map<String, List<String>> headers = t.stringLists("header");
    // Private CAs and client certificates, as containerd reads them: paths relative to the host's directory.
    List<Path> ca = new ArrayList<>();
    for (String c : t.strings("ca", List.of())) {
      ca.add(readable(t, "ca", dir.resolve(c)));
    }
    List<RegistryEndpoint.ClientCertificate> clients = new ArrayList<>();
    for (List<String> pair : t.stringPairs("client")) {
      clients.add(new RegistryEndpoint.ClientCertificate(readable(t, "client", dir.resolve(pair.get(0))),
          pair.size() == 2 ? Optional.of(readable(t, "client", dir.resolve(pair.get(1)))) : Optional.empty()));
    }
    if (ownTable) {
      t.rejectUnknownKeys();
    }
    return new RegistryEndpoint(base, caps, skipVerify, headers, overridePath, ca, clients);
  }

  private static Path readable(TomlTable t, String key, Path file) throws ConfigException {
    if (!Files.isReadable(file)) {
      throw t.invalid(key, file + " is not a readable file");
    }
    return file;
  }

  private static URI uri(TomlTable t, String key, String text) throws ConfigException {
    try {
      URI u = new URI(text.contains("://") ? text : "https://" + text);
      if (u.getHost() == null || !("http".equals(u.getScheme()) || "https".equals(u.getScheme()))) {
        throw new ConfigException(t.file(), key, "'" + text + "' is not an http(s) URL with a host");
      }
      return u;
    } catch (URISyntaxException e) {
      throw new ConfigException(t.file(), key, "'" + text + "' is not a URL: " + e.getReason(), e);
    }
  }
}
