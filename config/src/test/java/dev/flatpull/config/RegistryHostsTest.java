package dev.flatpull.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class RegistryHostsTest {
  @TempDir Path dir;

  @Test
  void endpoints_withoutFile_areTheOrigin() throws Exception {
    assertEquals("https://registry-1.docker.io/v2",
        new RegistryHosts(Optional.of(dir), false).endpoints("docker.io").get(0).apiRoot());
    assertEquals("http://127.0.0.1:5000/v2",
        new RegistryHosts(Optional.empty(), true).endpoints("127.0.0.1:5000").get(0).apiRoot());
  }

  @Test
  void endpoints_hostsToml_mirrorsFirstThenServer() throws Exception {
    Path d = Files.createDirectories(dir.resolve("registry.example.com:5000"));
    Files.writeString(d.resolve("hosts.toml"), """
        server = "https://registry.example.com:5000"
        [host."http://mirror.local:8080"]
          capabilities = ["pull", "resolve"]
          [host."http://mirror.local:8080".header]
            x-team = ["infra"]
        [host."https://cache.local/v2/proxy"]
          capabilities = ["pull"]
          skip_verify = true
          override_path = true
        """);
    List<RegistryEndpoint> e = new RegistryHosts(Optional.of(dir), false).endpoints("registry.example.com:5000");
    assertEquals(3, e.size());
    assertTrue(e.get(0).plainHttp());
    assertEquals(List.of("infra"), e.get(0).headers().get("x-team"));
    assertEquals(Set.of(RegistryEndpoint.Capability.PULL, RegistryEndpoint.Capability.RESOLVE), e.get(0).capabilities());
    assertTrue(e.get(1).skipVerify());
    assertEquals("https://cache.local/v2/proxy", e.get(1).apiRoot());
    assertEquals("https://registry.example.com:5000/v2", e.get(2).apiRoot());
  }

  @Test
  void endpoints_defaultFile_appliesToOtherHosts() throws Exception {
    Path d = Files.createDirectories(dir.resolve("_default"));
    Files.writeString(d.resolve("hosts.toml"), "[host.\"http://mirror:5000\"]\n");
    assertEquals("http://mirror:5000/v2", new RegistryHosts(Optional.of(dir), false).endpoints("quay.io").get(0).apiRoot());
  }

  @Test
  void endpoints_badCapability_namesFileAndKey() throws Exception {
    Path d = Files.createDirectories(dir.resolve("h.io"));
    Files.writeString(d.resolve("hosts.toml"), "[host.\"https://m\"]\ncapabilities = [\"fly\"]\n");
    ConfigException e = assertThrows(ConfigException.class, () -> new RegistryHosts(Optional.of(dir), false).endpoints("h.io"));
    assertTrue(e.file().endsWith("hosts.toml"));
    assertEquals("host.https://m.capabilities", e.key());
  }
}
