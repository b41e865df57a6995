package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Await;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/** {@code flatpull mount} as users run it: the launcher in the foreground, stopped by signals. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class MountCommandIT {
  private RegistryServer registry;
  private TestImage image;
  private String esgz;
  private Path work;
  private Path config;

  @BeforeAll
  void setUp() throws Exception {
    Processes.requireFuse();
    registry = RegistryServer.shared();
    image = TestImage.push(registry, "it/mount", "plain");
    esgz = registry.address() + "/it/mount:esgz";
    Cli.Run c = Cli.inProcess("convert", "--plain-http", image.reference.toString(), esgz);
    assertEquals(0, c.exitCode(), c.stderr());
    work = Files.createTempDirectory("flatpull-mountcmd");
    config = work.resolve("config.toml");
    Files.writeString(config, "root = \"" + work.resolve("root") + "\"\n");
  }

  @AfterAll
  void tearDown() throws Exception {
    if (registry != null) {
      registry.close();
    }
    if (work != null) {
      dev.flatpull.snapshotter.overlay.HostMounts.detachAllUnder(work);
      Processes.deleteTree(work);
    }
  }

  private Process start(Path mountPoint) throws IOException {
    Files.deleteIfExists(work.resolve("mount.log"));
    Path root = Path.of(System.getProperty("flatpull.root", "..")).toAbsolutePath().normalize();
    return new ProcessBuilder(root.resolve("bin/flatpull").toString(), "mount", "--plain-http", "--config",
        config.toString(), esgz, mountPoint.toString())
        .redirectErrorStream(true).redirectOutput(work.resolve("mount.log").toFile()).start();
  }

  private void awaitMounted(Path mountPoint, Process p) throws Exception {
    // The command's own word, not the directory: a stale mount can still show cached entries.
    Await.until(Duration.ofSeconds(60), () -> {
      assertTrue(p.isAlive(), () -> "mount exited: " + log());
      return Cli.mountSaysMounted(log()) && Files.exists(mountPoint.resolve("etc/motd"));
    }, () -> "mounted: " + log());
  }

  private String log() {
    try {
      return Files.readString(work.resolve("mount.log"));
    } catch (IOException e) {
      return e.toString();
    }
  }

  private long mountsUnder(Path dir) throws IOException {
    return dev.flatpull.core.MountTable.under(dir).size();
  }

  @Test
  void mount_showsTheMergedImageAndSigtermUnmountsEverything() throws Exception {
    Path mnt = work.resolve("mnt");
    Process p = start(mnt);
    awaitMounted(mnt, p);
    for (Map.Entry<String, byte[]> f : image.files.entrySet()) {
      assertArrayEquals(f.getValue(), Files.readAllBytes(mnt.resolve(f.getKey())), f.getKey());
    }
    for (String gone : image.deleted) {
      assertFalse(Files.exists(mnt.resolve(gone), LinkOption.NOFOLLOW_LINKS), gone);
    }
    assertEquals(3, mountsUnder(work), "two FUSE layers and the overlay");
    p.destroy();
    assertTrue(p.waitFor(30, TimeUnit.SECONDS));
    assertEquals(0, mountsUnder(work), "SIGTERM unmounts the overlay and every layer: " + log());
  }

  @Test
  void mount_afterAKilledRun_clearsItsStaleMountsAndMountsAgain() throws Exception {
    Path mnt = work.resolve("again");
    Process first = start(mnt);
    awaitMounted(mnt, first);
    first.destroyForcibly();
    assertTrue(first.waitFor(30, TimeUnit.SECONDS));
    assertEquals(3, mountsUnder(work), "a killed run leaves its mounts behind");
    Process second = start(mnt);
    awaitMounted(mnt, second);
    assertArrayEquals(image.files.get("etc/motd"), Files.readAllBytes(mnt.resolve("etc/motd")));
    assertEquals(3, mountsUnder(work), "the stale mounts are gone, only the new ones remain");
    second.destroy();
    assertTrue(second.waitFor(30, TimeUnit.SECONDS));
    assertEquals(0, mountsUnder(work));
  }
}
