package dev.flatpull.config;

import java.util.Optional;

/**
 * What a docker {@code config.json} holds for one registry: a user name and password (from {@code auth} or the
 * separate fields), an identity token (an OAuth2 refresh token), or a registry token (a bearer token used as is).
 */
public record RegistryCredential(
    Optional<String> username, Optional<String> password, Optional<String> identityToken,
    Optional<String> registryToken) {

  public static RegistryCredential basic(String username, String password) {
    return new RegistryCredential(Optional.of(username), Optional.of(password), Optional.empty(), Optional.empty());
  }

  public boolean hasBasic() {
    return username.isPresent() && password.isPresent();
  }

  @Override
  public String toString() {
    // Never print secrets, even by accident in a log line.
    return "RegistryCredential[username=" + username.orElse("") + ", secrets redacted]";
  }
}
