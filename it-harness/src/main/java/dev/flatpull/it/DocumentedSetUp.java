package dev.flatpull.it;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The daemon's JVM options and the memory limit of flatpull's two processes as the documented systemd unit
 * ({@code docs/examples/flatpull.service}) gives them: read from that file, so that the daemons the tests and benchmarks
 * start run as the documented set-up does, and a change to the set-up is measured where it is made. Read from the tree
 * {@code flatpull.root} names (a baseline build's own when a benchmark runs one).
 */
public final class DocumentedSetUp {
  private static final Pattern OPTIONS = Pattern.compile("(?m)^Environment=\"?FLATPULL_JAVA_OPTS=([^\"\\n]*)\"?$");
  private static final Pattern LIMIT = Pattern.compile("(?m)^MemoryMax=(\\d+)([KMG]?)$");

  private DocumentedSetUp() {}

  static Path unit() {
    return Path.of(System.getProperty("flatpull.root", "..")).toAbsolutePath().normalize()
        .resolve("docs/examples/flatpull.service");
  }

  /** {@code FLATPULL_JAVA_OPTS} of the unit, split on spaces; none when the unit has none. */
  public static List<String> daemonJavaOptions() throws IOException {
    Matcher m = OPTIONS.matcher(Files.readString(unit()));
    return m.find() ? List.of(m.group(1).trim().split("\\s+")) : List.of();
  }

  /** The unit's {@code MemoryMax} in bytes; empty when it sets none. */
  public static java.util.OptionalLong memoryLimitBytes() throws IOException {
    Matcher m = LIMIT.matcher(Files.readString(unit()));
    if (!m.find()) {
      return java.util.OptionalLong.empty();
    }
    long v = Long.parseLong(m.group(1));
    int shift = switch (m.group(2)) {
      case "K" -> 10;
      case "M" -> 20;
      case "G" -> 30;
      default -> 0;
    };
    return java.util.OptionalLong.of(v << shift);
  }
}
