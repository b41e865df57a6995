package dev.flatpull.snapshotter.cli;

import java.time.Duration;

/** Durations on the command line, as in the configuration file: 250ms, 30s, 5m, 1h. */
final class Durations {
  private Durations() {}

  static Duration parse(String option, String text) {
    String t = text.trim();
    try {
      if (t.endsWith("ms")) {
        return Duration.ofMillis(Long.parseLong(t.substring(0, t.length() - 2)));
      }
      long n = Long.parseLong(t.substring(0, t.length() - 1));
      switch (t.charAt(t.length() - 1)) {
        case 's':
          return Duration.ofSeconds(n);
        case 'm':
          return Duration.ofMinutes(n);
        case 'h':
          return Duration.ofHours(n);
        default:
          break;
      }
    } catch (NumberFormatException | StringIndexOutOfBoundsException e) {
      // Reported below.
    }
    throw new IllegalArgumentException(option + ": '" + text + "' is not a duration such as 250ms, 30s, 5m or 1h");
  }
}
