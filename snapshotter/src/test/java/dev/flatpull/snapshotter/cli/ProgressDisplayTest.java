package dev.flatpull.snapshotter.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class ProgressDisplayTest {
  private static final long MIB = 1 << 20;
  private static final long SECOND = 1_000_000_000L;
  private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
  private final PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
  private final AtomicLong now = new AtomicLong();

  private String shown() {
    return bytes.toString(StandardCharsets.UTF_8);
  }

  @Test
  void status_saysBytesShareRateAndTimeLeft() {
    assertEquals("layer 1/2 ab12: converting 45.0/180.0 MiB (25 %), 9.0 MiB/s, 15 s left",
        ProgressDisplay.status("layer 1/2 ab12: converting", 45 * MIB, 180 * MIB, 5 * SECOND));
    assertEquals("fetching 10.0/800.0 MiB (1 %), 1.0 MiB/s, 13 min 10 s left",
        ProgressDisplay.status("fetching", 10 * MIB, 800 * MIB, 10 * SECOND));
    assertEquals("fetching 0.0/8.0 MiB (0 %)", ProgressDisplay.status("fetching", 0, 8 * MIB, 0));
  }

  @Test
  void onATerminal_theStatusIsRewrittenInPlace_atMostTenTimesASecond_andClearedBeforeAStepsLine() {
    ProgressDisplay d = new ProgressDisplay(out, true, now::get);
    d.step("layer 1/1 ab12: fetching 8.0 MiB");
    d.bytes("fetching", 0, 8 * MIB);
    now.set(SECOND / 20);
    d.bytes("fetching", MIB, 8 * MIB); // 50 ms after the last one shown: not shown
    now.set(SECOND / 2);
    d.bytes("fetching", 4 * MIB, 8 * MIB);
    now.set(SECOND);
    d.bytes("fetching", 8 * MIB, 8 * MIB);
    d.step("pushed");
    d.clearStatus();
    assertEquals("layer 1/1 ab12: fetching 8.0 MiB\n"
        + "\r\033[Kfetching 4.0/8.0 MiB (50 %), 8.0 MiB/s, 0 s left"
        + "\r\033[Kfetching 8.0/8.0 MiB (100 %), 8.0 MiB/s"
        + "\r\033[Kpushed\n", shown());
  }

  @Test
  void piped_itStaysLineOriented_aLineEveryFiveSecondsOfAStep_andNoneForAShortOne() {
    ProgressDisplay d = new ProgressDisplay(out, false, now::get);
    d.bytes("short", 0, MIB);
    now.set(SECOND);
    d.bytes("short", MIB, MIB);
    d.bytes("long", 0, 100 * MIB);
    for (int s = 1; s <= 12; s++) {
      now.set(SECOND + s * SECOND);
      d.bytes("long", s * 8 * MIB, 100 * MIB);
    }
    d.step("done");
    d.clearStatus();
    assertEquals("long 40.0/100.0 MiB (40 %), 8.0 MiB/s, 7 s left\n"
        + "long 80.0/100.0 MiB (80 %), 8.0 MiB/s, 2 s left\n"
        + "done\n", shown().replace(System.lineSeparator(), "\n"));
  }

  @Test
  void aWait_onATerminal_isShownAtOnceAndRewritten_piped_aLineEveryFiveSeconds_andEndsWithTheNextStep() {
    ProgressDisplay terminal = new ProgressDisplay(out, true, now::get);
    terminal.status("waiting, 0.0 s");
    now.set(SECOND / 20);
    terminal.status("waiting, 0.1 s"); // 50 ms after the last one shown: not shown
    now.set(SECOND / 5);
    terminal.status("waiting, 0.2 s");
    terminal.step("ready");
    assertEquals("\r\033[Kwaiting, 0.0 s\r\033[Kwaiting, 0.2 s\r\033[Kready\n", shown());

    bytes.reset();
    now.set(0);
    ProgressDisplay piped = new ProgressDisplay(out, false, now::get);
    for (int s = 0; s <= 11; s++) {
      now.set(s * SECOND);
      piped.status("waiting, " + s + " s");
    }
    piped.step("ready");
    piped.status("waiting again, 0 s"); // a new wait: nothing at once, piped
    assertEquals("waiting, 5 s\nwaiting, 10 s\nready\n", shown().replace(System.lineSeparator(), "\n"));
  }
}
