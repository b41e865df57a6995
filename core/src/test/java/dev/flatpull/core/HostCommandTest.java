package dev.flatpull.core;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import org.junit.jupiter.api.Test;

class HostCommandTest {
  @Test
  void aCommandThatSucceeds_returns() {
    assertDoesNotThrow(() -> HostCommand.run("true"));
  }

  @Test
  void aCommandThatFails_isAnErrorNamingItWithItsOutput() {
    IOException e = assertThrows(IOException.class,
        () -> HostCommand.run("sh", "-c", "echo no such mount point >&2; exit 32"));
    assertTrue(e.getMessage().contains("sh -c") && e.getMessage().contains("no such mount point"), e.getMessage());
  }
}
