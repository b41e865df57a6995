package dev.flatpull.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class DaemonThreadsTest {
  @Test
  void threads_areDaemonsNamedForTheirWork_andRunTheirTask() throws Exception {
    int[] ran = {0};
    Thread t = DaemonThreads.named("flatpull-test").newThread(() -> ran[0]++);
    assertTrue(t.isDaemon(), "a daemon thread keeps no process alive");
    assertEquals("flatpull-test", t.getName());
    t.start();
    t.join();
    assertEquals(1, ran[0]);
  }
}
