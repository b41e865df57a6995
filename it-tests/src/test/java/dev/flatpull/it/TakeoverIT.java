package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Await;
import dev.flatpull.fuse.DeviceHandover;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * A FUSE mount outlives the process serving it: the process hands its open device to a holder (this test's process,
 * as the daemon would be), is killed with SIGKILL while a reader is inside a read it has taken from the kernel, and a
 * new process given the device serves the mount on. The reader sees no error and the layer's exact bytes, and the read
 * that spanned the kill completes: the kernel resent what the killed process had read and never answered.
 */
class TakeoverIT {
  private static final Duration WAIT = Duration.ofSeconds(30);
  // Each range the mount fetches waits this long: a kill almost always finds a read in flight.
  private static final long DELAY_MILLIS = 300;

  @Test
  void aKilledServer_isReplacedByOneGivenItsDevice_andNoReadFails() throws Exception {
    Processes.requireFuse();
    try (Cleanup cleanup = new Cleanup()) {
      Path work = cleanup.deleteLater(Files.createTempDirectory("flatpull-takeover"));
      Path mountPoint = work.resolve("mnt");
      Path socket = work.resolve("holder.sock");
      byte[][] files = TakeoverServer.files();
      DeviceHandover holder = cleanup.add(DeviceHandover.listen(socket));
      List<Process> servers = new ArrayList<>();
      Process first = server("mount", mountPoint, socket, work, cleanup);
      servers.add(first);
      DeviceHandover.Received held;
      try (DeviceHandover peer = holder.accept()) {
        held = peer.receive();
      }
      assertTrue(held.descriptor() >= 0, "the server handed over its device");

      List<String> failures = Collections.synchronizedList(new ArrayList<>());
      AtomicInteger rounds = new AtomicInteger();
      AtomicLong readingSince = new AtomicLong();
      List<long[]> reads = Collections.synchronizedList(new ArrayList<>());
      AtomicBoolean stop = new AtomicBoolean();
      Thread reader = new Thread(() -> {
        while (!stop.get()) {
          try {
            Processes.dropCaches();
            for (int i = 0; i < files.length; i++) {
              long start = System.nanoTime();
              readingSince.set(start);
              byte[] got = Files.readAllBytes(mountPoint.resolve("f" + i));
              reads.add(new long[] {start, System.nanoTime()});
              readingSince.set(0);
              if (!java.util.Arrays.equals(files[i], got)) {
                failures.add("f" + i + ": " + got.length + " bytes, not the layer's");
              }
            }
            rounds.incrementAndGet();
          } catch (Exception e) {
            failures.add(e.toString());
          }
        }
      }, "takeover-reader");
      reader.start();
      cleanup.add((AutoCloseable) () -> {
        // Servers gone and the last holder's device closed, the kernel ends the connection: a read still waiting fails.
        stop.set(true);
        for (Process p : servers) {
          p.destroyForcibly().waitFor();
        }
        DeviceHandover.closeDescriptor(held.descriptor());
        reader.join(WAIT.toMillis());
        Processes.run(List.of("umount", "-l", mountPoint.toString()), 30);
      });
      // Killed inside the first round, while the server fetches what the reader waits for: it has read the request
      // from the kernel and will never answer it.
      Await.until(WAIT, () -> reads.size() >= 1 && readingSince.get() != 0, () -> "a read in flight: " + failures);
      Thread.sleep(DELAY_MILLIS / 2);
      long killedAt = System.nanoTime();
      first.destroyForcibly().waitFor();
      Thread.sleep(300);
      int roundsAtKill = rounds.get();
      Process second = server("resume", mountPoint, socket, work, cleanup);
      servers.add(second);
      try (DeviceHandover peer = holder.accept()) {
        assertEquals("resume", new String(peer.receive().message(), StandardCharsets.UTF_8));
        peer.send(held.descriptor(), held.message());
      }
      long resumedAt = System.nanoTime();
      Await.until(WAIT, () -> rounds.get() >= roundsAtKill + 2 || !failures.isEmpty(),
          () -> "two rounds of reads after the takeover: " + rounds.get() + " in all");
      stop.set(true);
      reader.join(WAIT.toMillis());
      assertEquals(List.of(), failures);
      boolean spanned = reads.stream().anyMatch(r -> r[0] < killedAt && r[1] > resumedAt);
      assertTrue(spanned, "a read was in flight from before the kill until after the takeover");
      long pause = reads.stream().filter(r -> r[0] < killedAt && r[1] > resumedAt)
          .mapToLong(r -> r[1] - r[0]).max().orElse(0);
      System.out.printf("takeover: the read in flight at the kill took %d ms (kill to resume %d ms); %d rounds%n",
          pause / 1_000_000, (resumedAt - killedAt) / 1_000_000, rounds.get());
      assertTrue(second.isAlive(), "the second server serves");
    }
  }

  private static Process server(String mode, Path mountPoint, Path socket, Path work, Cleanup cleanup)
      throws Exception {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    Process p = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
        TakeoverServer.class.getName(), mode, mountPoint.toString(), socket.toString(),
        Long.toString(DELAY_MILLIS), work.toString())
        .redirectErrorStream(true).redirectOutput(work.resolve(mode + ".log").toFile()).start();
    cleanup.add((AutoCloseable) () -> p.destroyForcibly().waitFor());
    return p;
  }
}
