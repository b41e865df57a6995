package dev.flatpull.it.bench;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.it.JvmServiceJar;
import dev.flatpull.trace.probe.Probe;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.jar.JarEntry;
import java.util.jar.JarInputStream;
import org.junit.jupiter.api.Test;

class WorkloadTest {
  @Test
  void everyServiceHasAProbeRecordAccepts_andAnUnknownNameIsRefused() {
    for (String name : Workload.NAMES) {
      Workload w = Workload.of(name);
      assertEquals(name, w.name());
      assertEquals(w.probe(), Probe.parse(w.probe()).spec());
      assertFalse(w.command().isEmpty());
    }
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Workload.of("redis"));
    assertTrue(e.getMessage().contains("python, http, jvm, database"), e.getMessage());
  }

  @Test
  void theNextVersionOfAConfigurationHasACommentAppended() throws IOException {
    byte[] old = "listen_addresses = 'localhost'\n".getBytes(StandardCharsets.US_ASCII);
    assertEquals("listen_addresses = 'localhost'\n\n# the next version\n",
        new String(Workload.of("database").nextVersionOf(old), StandardCharsets.US_ASCII));
  }

  @Test
  void theJvmServicesNextVersionIsItsJarRebuiltWithAnotherVersion_theSameVersionTheSameBytes() throws IOException {
    byte[] first = JvmServiceJar.build("1");
    assertArrayEquals(first, JvmServiceJar.build("1"));
    byte[] next = Workload.of("jvm").nextVersionOf(first);
    Map<String, String> a = entries(first);
    Map<String, String> b = entries(next);
    assertEquals("1\n", a.get("version.txt"));
    assertEquals("2\n", b.get("version.txt"));
    assertEquals(a.get("HelloServer.class"), b.get("HelloServer.class"));
    assertEquals("HelloServer", a.get("Main-Class"));
  }

  private static Map<String, String> entries(byte[] jar) throws IOException {
    Map<String, String> out = new HashMap<>();
    try (JarInputStream in = new JarInputStream(new ByteArrayInputStream(jar))) {
      if (in.getManifest() != null) {
        out.put("Main-Class", in.getManifest().getMainAttributes().getValue("Main-Class"));
      }
      for (JarEntry e = in.getNextJarEntry(); e != null; e = in.getNextJarEntry()) {
        out.put(e.getName(), new String(in.readAllBytes(), StandardCharsets.ISO_8859_1));
      }
    }
    return out;
  }
}
