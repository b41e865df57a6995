package dev.flatpull.snapshotter.store;

import dev.flatpull.core.OwnerOnly;
import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.logging.Logger;

/**
 * Where the SQLite driver puts the native library it extracts from its jar at every process start (1.1 MB, a name of
 * its own each time, with a {@code .lck} file it deletes at a clean exit). By default that is {@code /tmp}, where a
 * killed process leaves both for good, which the driver's own clean-up then never removes: a daemon restarted again
 * and again (killed at a memory limit, say) filled {@code /tmp}, 343 pairs after a few days of the crash tests. Here
 * they go to a directory of flatpull's root (owner-only, unlike {@code /tmp}), and those older than a minute are
 * deleted as the daemon starts: a process that has loaded its copy keeps it mapped when the file goes, and one still
 * extracting is younger.
 */
public final class SqliteNativeLibrary {
  private static final Logger LOG = Logger.getLogger(SqliteNativeLibrary.class.getName());
  /** The driver's system property for the directory it extracts into. */
  static final String TMPDIR = "org.sqlite.tmpdir";
  private static final Duration STALE = Duration.ofMinutes(1);

  private SqliteNativeLibrary() {}

  /**
   * Makes the driver extract into {@code dir}, unless the property is set already (by the operator, or earlier in this
   * process), and deletes what earlier processes left there; returns the files deleted. Call before the first store
   * is opened.
   */
  public static synchronized int placeUnder(Path dir) throws IOException {
    if (System.getProperty(TMPDIR) != null) {
      return 0;
    }
    OwnerOnly.directory(dir);
    int deleted = 0;
    Instant before = Instant.now().minus(STALE);
    try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, "sqlite-*")) {
      for (Path f : files) {
        try {
          if (Files.getLastModifiedTime(f).toInstant().isBefore(before) && Files.deleteIfExists(f)) {
            deleted++;
          }
        } catch (IOException e) {
          LOG.fine("left " + f + ": " + e);
        }
      }
    }
    System.setProperty(TMPDIR, dir.toString());
    if (deleted > 0) {
      LOG.info("deleted " + deleted + " files of the SQLite driver's native library left by processes that did not"
          + " exit cleanly, under " + dir);
    }
    return deleted;
  }
}
