package dev.flatpull.it;

import dev.flatpull.snapshotter.cli.FlatpullCommand;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** Runs the flatpull command line, in this JVM (fast, for many calls) or as the installed launcher (as users do). */
public final class Cli {
  private Cli() {}

  /** What a run printed and returned. */
  public record Run(int exitCode, byte[] stdout, String stderr) {
    public String out() {
      return new String(stdout, StandardCharsets.UTF_8);
    }
  }

  /**
   * Whether the output of {@code flatpull mount} has its "mounted REF at MOUNTPOINT" line: the tree is then in place
   * at the mount point. Its log's "mounted in N ms" of each layer comes earlier, before the layers are stacked there.
   */
  public static boolean mountSaysMounted(String output) {
    return output.lines().anyMatch(l -> l.startsWith("mounted "));
  }

  /** Runs in this JVM with stdout and stderr captured. Not thread-safe (it swaps the global streams). */
  public static synchronized Run inProcess(String... args) {
    PrintStream out = System.out;
    PrintStream err = System.err;
    ByteArrayOutputStream o = new ByteArrayOutputStream();
    ByteArrayOutputStream e = new ByteArrayOutputStream();
    try (PrintStream po = new PrintStream(o, true); PrintStream pe = new PrintStream(e, true, StandardCharsets.UTF_8)) {
      System.setOut(po);
      System.setErr(pe);
      int code = FlatpullCommand.execute(args);
      po.flush();
      pe.flush();
      return new Run(code, o.toByteArray(), e.toString(StandardCharsets.UTF_8));
    } finally {
      System.setOut(out);
      System.setErr(err);
    }
  }

  /** Runs {@code bin/flatpull} from the source tree (the built jar must exist, as after {@code mvn package}). */
  public static Run launcher(String... args) throws IOException, InterruptedException {
    Path root = Path.of(System.getProperty("flatpull.root", "..")).toAbsolutePath().normalize();
    Path launcher = root.resolve("bin/flatpull");
    if (!Files.isExecutable(launcher)) {
      throw new IllegalStateException("no launcher at " + launcher);
    }
    List<String> cmd = new ArrayList<>(List.of(launcher.toString()));
    cmd.addAll(List.of(args));
    Processes.Result r = Processes.run(cmd, 300);
    return new Run(r.exitCode(), r.stdout().getBytes(StandardCharsets.ISO_8859_1), r.stderr());
  }
}
