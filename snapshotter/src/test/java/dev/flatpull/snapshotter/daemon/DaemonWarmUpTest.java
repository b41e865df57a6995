package dev.flatpull.snapshotter.daemon;

import static org.junit.jupiter.api.Assertions.assertFalse;

import dev.flatpull.fetcher.oci.Platform;
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
    DaemonWarmUp.run(dir.resolve("warm-up"), Platform.current());
    assertFalse(Files.exists(dir.resolve("warm-up")));
  }
}
