package dev.flatpull.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class RegistryCredentialsTest {
  @TempDir Path dir;

  @Test
  void load_authsWithBase64IdentityAndHubKeys() throws Exception {
    Path f = dir.resolve("config.json");
    Files.writeString(f, """
        {"auths": {
          "https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNzOndpdGg6Y29sb25z"},
          "ghcr.io": {"identitytoken": "refresh-me"},
          "127.0.0.1:5000": {"username": "u", "password": "p"}
        }, "credsStore": "desktop"}
        """);
    RegistryCredentials c = RegistryCredentials.load(f);
    RegistryCredential hub = c.forHost("docker.io").orElseThrow();
    assertEquals(Optional.of("user"), hub.username());
    assertEquals(Optional.of("pass:with:colons"), hub.password());
    assertEquals(Optional.of("refresh-me"), c.forHost("ghcr.io").orElseThrow().identityToken());
    assertTrue(c.forHost("127.0.0.1:5000").orElseThrow().hasBasic());
    assertEquals(Optional.empty(), c.forHost("quay.io"));
    assertTrue(!hub.toString().contains("pass"), "secrets are not printed");
  }

  @Test
  void load_badBase64_namesTheKey() throws Exception {
    Path f = dir.resolve("config.json");
    Files.writeString(f, "{\"auths\":{\"h.io\":{\"auth\":\"%%%\"}}}");
    ConfigException e = assertThrows(ConfigException.class, () -> RegistryCredentials.load(f));
    assertEquals("auths.h.io.auth", e.key());
  }

  @Test
  void load_missingFile_meansNoCredentials() throws Exception {
    assertEquals(Optional.empty(), RegistryCredentials.load(dir.resolve("none.json")).forHost("h.io"));
  }
}
