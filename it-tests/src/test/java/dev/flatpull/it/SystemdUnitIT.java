package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The systemd unit in docs/examples is valid, and keeps the FUSE manager alive across restarts of the daemon. */
class SystemdUnitIT {
  @TempDir Path dir;

  @Test
  void theUnitVerifies_andSignalsOnlyTheDaemon() throws Exception {
    Path analyze = Processes.require("systemd-analyze");
    Path root = Path.of(System.getProperty("flatpull.root", "..")).toAbsolutePath().normalize();
    String unit = Files.readString(root.resolve("docs/examples/flatpull.service"));
    assertTrue(unit.lines().anyMatch(l -> l.equals("KillMode=process")), "restarting the unit must spare the manager");
    // The installed path does not exist here; the launcher in the source tree stands in for it.
    Path copy = dir.resolve("flatpull.service");
    Files.writeString(copy, unit.replace("/usr/local/bin/flatpull", root.resolve("bin/flatpull").toString()));
    Processes.Result r = Processes.run(List.of(analyze.toString(), "verify", copy.toString()), 60);
    assertEquals(0, r.exitCode(), r.stdout() + r.stderr());
    assertTrue(r.stderr().isBlank(), r.stderr());
  }
}
