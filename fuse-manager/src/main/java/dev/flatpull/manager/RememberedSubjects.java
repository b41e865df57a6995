package dev.flatpull.manager;

import dev.flatpull.core.Digest;
import dev.flatpull.core.NamedFiles;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.logging.Logger;

/**
 * The manifests whose runtime images this node loaded, per repository, the latest first and at most {@link #MAX}:
 * where a version without a runtime image of its own looks first for one to borrow (docs/runtime-images.md,
 * "Borrowing at a node"), before the registry's tag listing, which a registry without the referrers tag schema's tags
 * cannot give. Kept among the page cache's named files, one small file per repository, so that a FUSE manager
 * restarted or replaced, or a node after a reboot, still knows them. A file that does not read as this list is
 * ignored, said in one log line, and written again at the next load; eviction of a file only costs that memory.
 * Thread-safe.
 */
final class RememberedSubjects {
  private static final Logger LOG = Logger.getLogger(RememberedSubjects.class.getName());
  static final int MAX = 64;
  private static final String HEADER = "flatpull runtime-image subjects 1 ";

  private final NamedFiles files;
  // Per repository, once read from its file or first remembered.
  private final Map<String, List<Digest>> byRepository = new HashMap<>();

  RememberedSubjects(NamedFiles files) {
    this.files = files;
  }

  /** The file that keeps {@code repository}'s subjects (its name says nothing of the repository's own). */
  static String fileName(String repository) {
    return "runtime-image-subjects-" + Digest.sha256(repository.getBytes(StandardCharsets.UTF_8)).hex();
  }

  /** The subjects remembered for {@code repository} ({@code registry/name}), the latest first. */
  synchronized List<Digest> of(String repository) {
    return List.copyOf(loaded(repository));
  }

  /** Remembers that {@code subject}'s runtime image was loaded from {@code repository}, and keeps the list. */
  synchronized void remember(String repository, Digest subject) {
    List<Digest> subjects = loaded(repository);
    if (!subjects.isEmpty() && subjects.get(0).equals(subject)) {
      return;
    }
    subjects.remove(subject);
    subjects.add(0, subject);
    while (subjects.size() > MAX) {
      subjects.remove(subjects.size() - 1);
    }
    StringBuilder text = new StringBuilder(HEADER).append(repository).append('\n');
    subjects.forEach(d -> text.append(d).append('\n'));
    byte[] bytes = text.toString().getBytes(StandardCharsets.UTF_8);
    try {
      files.keep(fileName(repository), ch -> {
        ByteBuffer b = ByteBuffer.wrap(bytes);
        while (b.hasRemaining()) {
          ch.write(b);
        }
      });
    } catch (IOException e) {
      // Remembered in memory all the same; only a restarted manager forgets it.
      LOG.warning("keeping the runtime-image subjects of " + repository + " failed: " + e);
    }
  }

  private List<Digest> loaded(String repository) {
    List<Digest> subjects = byRepository.get(repository);
    if (subjects == null) {
      subjects = read(repository);
      byRepository.put(repository, subjects);
    }
    return subjects;
  }

  private List<Digest> read(String repository) {
    String name = fileName(repository);
    List<Digest> subjects = new ArrayList<>();
    try {
      Optional<Path> kept = files.find(name);
      if (kept.isEmpty()) {
        return subjects;
      }
      List<String> lines = Files.readAllLines(kept.get(), StandardCharsets.UTF_8);
      if (lines.isEmpty() || !lines.get(0).equals(HEADER + repository)) {
        throw new IOException("it does not start with the header of " + repository);
      }
      for (String line : lines.subList(1, lines.size())) {
        if (subjects.size() < MAX) {
          subjects.add(Digest.parse(line));
        }
      }
      return subjects;
    } catch (NoSuchFileException evicted) {
      return new ArrayList<>();
    } catch (IOException | IllegalArgumentException | java.io.UncheckedIOException e) {
      LOG.warning("runtime-image subjects of " + repository + " kept as " + name + " ignored: " + e.getMessage()
          + "; written again at its next load");
      return new ArrayList<>();
    }
  }
}
