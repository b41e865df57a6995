package dev.flatpull.manager;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The kernel settings that make it read more than a process asked for: a mount's readahead
 * ({@code /sys/class/bdi/MAJ:MIN/read_ahead_kb}) and page-fault fault-around ({@code fault_around_bytes} in debugfs).
 * While recording they are narrowed, so that recorded pages are the ones the service read (as TrIO does), and
 * restored afterwards. At a cold start with a runtime image, a mount's readahead alone is narrowed the same way for
 * the start-up window: the kernel then asks for the pages the trace recorded, which the runtime image holds.
 * (Fault-around is host-wide and maps pages already cached without reading, so a start leaves it alone.) Knobs a
 * kernel lacks are reported, not fatal.
 */
final class ReadaheadKnobs {
  private static final Path FAULT_AROUND = Path.of("/sys/kernel/debug/fault_around_bytes");
  private final Map<Path, String> saved = new LinkedHashMap<>();

  /** Narrows the knobs for {@code mountPoints}; returns what could not be narrowed. */
  synchronized List<String> narrow(List<Path> mountPoints) {
    List<String> notes = narrowReadahead(mountPoints);
    try {
      set(FAULT_AROUND, "4096");
    } catch (IOException e) {
      notes.add("fault-around not narrowed (needs debugfs at /sys/kernel/debug): " + e.getMessage());
    }
    return notes;
  }

  /** Narrows only the readahead of {@code mountPoints}; returns what could not be narrowed. */
  synchronized List<String> narrowReadahead(List<Path> mountPoints) {
    List<String> notes = new ArrayList<>();
    for (Path m : mountPoints) {
      try {
        Path knob = Path.of("/sys/class/bdi", deviceOf(m), "read_ahead_kb");
        set(knob, "0");
      } catch (IOException e) {
        notes.add("readahead of " + m + " not narrowed: " + e.getMessage());
      }
    }
    return notes;
  }

  synchronized void restore() {
    saved.forEach((knob, value) -> {
      try {
        Files.writeString(knob, value);
      } catch (IOException e) {
        // The mount may be gone already; nothing to restore then.
      }
    });
    saved.clear();
  }

  private void set(Path knob, String value) throws IOException {
    if (!Files.isWritable(knob)) {
      throw new IOException(knob + " is not writable");
    }
    saved.putIfAbsent(knob, Files.readString(knob).trim());
    Files.writeString(knob, value);
  }

  /** MAJ:MIN of the file system mounted at {@code mountPoint}, from /proc/self/mountinfo. */
  private static String deviceOf(Path mountPoint) throws IOException {
    Path target = mountPoint.toAbsolutePath().normalize();
    for (dev.flatpull.core.MountTable.Mount m : dev.flatpull.core.MountTable.read()) {
      if (m.point().equals(target)) {
        return m.device();
      }
    }
    throw new IOException("not mounted");
  }
}
