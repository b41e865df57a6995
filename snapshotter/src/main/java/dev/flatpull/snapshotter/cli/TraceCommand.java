package dev.flatpull.snapshotter.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.trace.LayerTrace;
import dev.flatpull.trace.PageRun;
import dev.flatpull.trace.Trace;
import dev.flatpull.trace.TraceFile;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code flatpull trace}: working with trace files. */
@Command(name = "trace", mixinStandardHelpOptions = true, description = "Work with trace files (docs/traces.md).",
    subcommands = {TraceCommand.Show.class})
final class TraceCommand implements Runnable {
  @Override
  public void run() {
    new picocli.CommandLine(this).usage(System.out);
  }

  @Command(name = "show", mixinStandardHelpOptions = true,
      description = "Summarise a trace: service version, time to ready, pages and bytes per layer, top files by bytes.")
  static final class Show implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "FILE")
    Path file;

    @Option(names = "--json", description = "Print the whole trace as JSON.")
    boolean json;

    @Option(names = "--top", defaultValue = "10", description = "How many files to list.")
    int top;

    @Override
    public Integer call() throws Exception {
      Trace t = TraceFile.read(file);
      if (json) {
        System.out.println(new ObjectMapper().writerWithDefaultPrettyPrinter().writeValueAsString(TraceFile.toJson(t)));
        return 0;
      }
      var s = t.service();
      System.out.println("service      " + s.key());
      System.out.println("image        " + s.image() + " (" + s.manifestDigest() + ", " + s.platform() + ")");
      System.out.println("command      " + (s.command().isEmpty() ? "(the image's)" : String.join(" ", s.command())));
      if (!s.environment().isEmpty()) {
        System.out.println("environment  " + String.join(" ", s.environment()));
      }
      if (!s.workingDirectory().isEmpty()) {
        System.out.println("working dir  " + s.workingDirectory());
      }
      System.out.println("probes       " + String.join(" ", s.probes()));
      System.out.println("recorded     " + t.recordedAt() + " by flatpull " + t.flatpullVersion() + ", " + t.runs()
          + " run" + (t.runs() == 1 ? "" : "s"));
      List<Long> ready = new ArrayList<>(t.readyMillis());
      ready.sort(null);
      System.out.printf("ready after  %.2f s (median of %d; %s ms)%n", ready.get(ready.size() / 2) / 1000.0,
          ready.size(), t.readyMillis());
      System.out.printf("total        %d pages, %.1f MiB%n", t.pages(), t.bytes() / 1048576.0);
      Map<String, Long> byFile = new HashMap<>();
      for (LayerTrace l : t.layers()) {
        System.out.printf("layer        %s: %d pages, %.1f MiB, %d files%n", l.layerDigest(), l.pages(),
            l.bytes() / 1048576.0, l.files().size());
        for (PageRun r : l.runs()) {
          byFile.merge(l.files().get(r.file()), (long) r.pages() * LayerTrace.PAGE_SIZE, Long::sum);
        }
      }
      System.out.println("top files by bytes:");
      byFile.entrySet().stream().sorted(Map.Entry.<String, Long>comparingByValue(Comparator.reverseOrder())).limit(top)
          .forEach(e -> System.out.printf("  %10d  %s%n", e.getValue(), e.getKey()));
      return 0;
    }
  }
}
