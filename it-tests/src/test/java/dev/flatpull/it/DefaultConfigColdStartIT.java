package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A cold start with flatpull's default configuration (landmark prefetch and background fetch on), which the other
 * integration tests turn off to count bytes: that is how a 30-second stall between the background fetch and on-demand
 * reads went unseen. The service must be ready well before the reservation wait (30 s) could have run out.
 */
class DefaultConfigColdStartIT {
  private static final Cleanup cleanup = new Cleanup();
  private static FlatpullDaemon flatpull;
  private static ContainerdServer containerd;
  private static String image;

  @BeforeAll
  static void start() throws Exception {
    Processes.require("runc");
    RegistryServer registry = cleanup.add(RegistryServer.start());
    image = DebianImage.pushPythonEstargz(registry.address(), "it/python");
    flatpull = cleanup.add(FlatpullDaemon.startWithDefaultFetching());
    containerd = cleanup.add(ContainerdServer.withFlatpull(flatpull.socket()));
  }

  @AfterAll
  static void stop() throws Exception {
    cleanup.close();
  }

  @Test
  void coldStart_withBackgroundFetchOn_isReadyWithoutStalling() throws Exception {
    Instant t0 = Instant.now();
    containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
    Instant pulled = Instant.now();
    // Several modules in a row, while the background fetch moves the rest of the layer.
    Processes.Result run = containerd.ctrOk("run", "--rm", "--snapshotter", "flatpull", image, "py-default",
        "/usr/bin/python3", "-c", "import json, http.server, email.parser, urllib.request, decimal, logging, argparse;"
            + " print(json.dumps({'ok': 40 + 2}))");
    Instant ready = Instant.now();
    assertEquals("{\"ok\": 42}", run.stdout().trim());
    Duration pull = Duration.between(t0, pulled);
    Duration start = Duration.between(pulled, ready);
    System.out.printf("default configuration: pull %d ms, start to exit %d ms%n", pull.toMillis(), start.toMillis());
    assertTrue(start.compareTo(Duration.ofSeconds(20)) < 0, "the container took " + start + " (a stall?): "
        + flatpull.log());
  }
}
