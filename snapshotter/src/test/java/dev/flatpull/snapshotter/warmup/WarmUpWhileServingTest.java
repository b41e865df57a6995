package dev.flatpull.snapshotter.warmup;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The FUSE manager's warm-up runs while it serves, and stops at its next step once a layer is asked for. */
class WarmUpWhileServingTest {
  @TempDir Path root;
  private final List<String> logged = new CopyOnWriteArrayList<>();
  private final Handler capture = new Handler() {
    @Override
    public void publish(LogRecord r) {
      logged.add(r.getMessage());
    }

    @Override
    public void flush() {}

    @Override
    public void close() {}
  };

  // Held: the log manager keeps loggers only weakly, and one collected before WarmUp is loaded loses the handler.
  private final Logger log = Logger.getLogger(WarmUp.class.getName());

  @BeforeEach
  void listen() {
    log.addHandler(capture);
  }

  @AfterEach
  void stopListening() {
    log.removeHandler(capture);
  }

  @Test
  void aLayerAskedFor_stopsTheWarmUpAtItsNextStep_leavingNothingBehind() throws Exception {
    FlatpullConfig config = FlatpullConfig.parse("flatpull.toml", "root = \"" + root + "\"\n");
    AtomicInteger looked = new AtomicInteger();
    // Asked for at the warm-up's third look: after its service's first round, before it mounts anything again.
    WarmUp.whileServing(config, "test", () -> looked.incrementAndGet() >= 3);

    assertTrue(logged.stream().anyMatch(m -> m.startsWith("warm-up stopped after ") && m.endsWith("a layer was asked"
        + " for")), String.valueOf(logged));
    assertFalse(logged.stream().anyMatch(m -> m.startsWith("warmed up") || m.startsWith("warm-up failed")),
        String.valueOf(logged));
    assertTrue(looked.get() == 3, "stopped at the first look that saw the layer asked for: " + looked.get());
    assertFalse(Files.exists(root.resolve("warm-up-service")));
    assertFalse(Files.exists(root.resolve("warm-up")));
  }

  /**
   * Not asked for: every step runs (the service's runtime image streamed; a failure of any step is logged as the
   * warm-up's failure), and the young generation is emptied last, once nothing of the warm-up allocates any more.
   */
  @Test
  void notAskedFor_runsEveryStep_thenCollectsItsGarbage() throws Exception {
    FlatpullConfig config = FlatpullConfig.parse("flatpull.toml", "root = \"" + root + "\"\n");

    WarmUp.whileServing(config, "test", () -> false);

    assertFalse(logged.stream().anyMatch(m -> m.startsWith("warm-up failed") || m.startsWith("warm-up stopped")),
        String.valueOf(logged));
    int collected = indexOf(m -> m.startsWith("warm-up's garbage collected in "));
    int warmed = indexOf(m -> m.startsWith("warmed up the remote-layer path in "));
    assertTrue(collected >= 0 && warmed > collected, "collected, then warmed up: " + logged);
    assertFalse(Files.exists(root.resolve("warm-up-service")));
    assertFalse(Files.exists(root.resolve("warm-up")));
  }

  private int indexOf(java.util.function.Predicate<String> p) {
    for (int i = 0; i < logged.size(); i++) {
      if (p.test(logged.get(i))) {
        return i;
      }
    }
    return -1;
  }

  @Test
  void warmUpOff_runsNothing() throws Exception {
    FlatpullConfig config = FlatpullConfig.parse("flatpull.toml",
        "root = \"" + root + "\"\n[snapshotter]\nwarm_up = false\n");
    AtomicInteger looked = new AtomicInteger();
    WarmUp.whileServing(config, "test", () -> looked.incrementAndGet() > 0);
    assertTrue(looked.get() == 0 && logged.isEmpty(), looked + " " + logged);
  }
}
