package dev.flatpull.trace;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Test;

class TraceRecorderTest {
  @Test
  void readsBecomePages_deduplicated_inFirstAccessOrder() {
    TraceRecorder r = new TraceRecorder();
    TraceRecorder.ReadTap a = r.tap("sha256:a");
    a.read("/ignored-before-start", 0, 10);
    r.start();
    a.read("/bin/sh", 4096 * 3, 8192);     // pages 3, 4
    a.read("/lib/libc.so", 100, 10);        // page 0
    a.read("/bin/sh", 4096 * 4 + 5, 4096);  // pages 4 (again), 5
    a.read("/bin/sh", 0, 1);                // page 0
    a.read("/empty", 0, 0);                 // nothing read
    Map<String, LayerTrace> t = r.stop();
    LayerTrace l = t.get("sha256:a");
    assertEquals(List.of("/bin/sh", "/lib/libc.so"), l.files());
    List<String> order = new ArrayList<>();
    for (PageRun run : l.runs()) {
      for (int i = 0; i < run.pages(); i++) {
        order.add(l.files().get(run.file()) + "#" + (run.firstPage() + i));
        assertEquals(1, run.frequency());
      }
    }
    assertEquals(List.of("/bin/sh#3", "/bin/sh#4", "/lib/libc.so#0", "/bin/sh#5", "/bin/sh#0"), order);
    assertEquals(5, l.pages());
    assertEquals(5 * 4096, l.bytes());
    assertThrows(IllegalStateException.class, r::stop);
  }

  @Test
  void consecutivePages_becomeOneRun() {
    TraceRecorder r = new TraceRecorder();
    r.start();
    TraceRecorder.ReadTap a = r.tap("L");
    for (int i = 0; i < 100; i++) {
      a.read("/big", i * 4096L, 4096);
    }
    LayerTrace l = r.stop().get("L");
    assertEquals(1, l.runs().size());
    assertEquals(new PageRun(0, 0, 100, l.runs().get(0).firstAccessMicros(), 1), l.runs().get(0));
  }

  @Test
  void concurrentReaders_loseNothing() throws Exception {
    TraceRecorder r = new TraceRecorder();
    r.start();
    int threads = 8;
    int perThread = 20_000;
    CountDownLatch go = new CountDownLatch(1);
    List<Thread> ts = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      String file = "/f" + t;
      TraceRecorder.ReadTap tap = r.tap("L");
      Thread th = new Thread(() -> {
        try {
          go.await();
        } catch (InterruptedException e) {
          return;
        }
        for (int i = 0; i < perThread; i++) {
          tap.read(file, i * 4096L, 4096);
        }
      });
      th.start();
      ts.add(th);
    }
    go.countDown();
    for (Thread t : ts) {
      t.join();
    }
    LayerTrace l = r.stop().get("L");
    assertEquals((long) threads * perThread, l.pages());
    assertEquals(threads, l.files().size());
  }

  @Test
  void merging_countsInHowManyRecordingsEachPageWasRead() {
    LayerTrace first = new LayerTrace("L", List.of("/a", "/b"), List.of(new PageRun(0, 0, 2, 5, 1), new PageRun(1, 7, 1, 9, 1)));
    LayerTrace second = new LayerTrace("L", List.of("/b", "/c"), List.of(new PageRun(0, 7, 1, 3, 1), new PageRun(1, 0, 1, 4, 1)));
    List<LayerTrace> merged = TraceMerger.merge(List.of(Map.of("L", first), Map.of("L", second)));
    LayerTrace m = merged.get(0);
    assertEquals(List.of("/a", "/b", "/c"), m.files());
    assertEquals(List.of(new PageRun(0, 0, 2, 5, 1), new PageRun(1, 7, 1, 3, 2), new PageRun(2, 0, 1, 4, 1)), m.runs());
    assertTrue(m.pages() == 4);
  }
}
