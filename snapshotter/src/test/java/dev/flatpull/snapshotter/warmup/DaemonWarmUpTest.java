package dev.flatpull.snapshotter.warmup;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.snapshotter.overlay.OverlaySnapshotter;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class DaemonWarmUpTest {
  @TempDir Path dir;

  /**
   * Every call answers as containerd's would see it (the remote Prepare AlreadyExists, a Stat of nothing NotFound, the
   * rest succeed: any other answer throws), over gRPC on a unix socket, and nothing is left behind.
   */
  @Test
  void run_answersContainerdsCallsAroundARemotePrepare_andLeavesNothingBehind() throws Exception {
    OverlaySnapshotter.Environment env = OverlaySnapshotter.Environment.system();
    DaemonWarmUp.run(dir.resolve("warm-up"), Platform.current(), env);
    assertFalse(Files.exists(dir.resolve("warm-up")));
    assertTrue(env.deleter().isShutdown(), "the throwaway snapshotter's deletion thread ends with it");
  }
}
