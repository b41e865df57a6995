package dev.flatpull.snapshotter.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.time.Instant;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SqliteNativeLibraryTest {
  @TempDir Path root;
  private String saved;

  @BeforeEach
  void clear() {
    saved = System.clearProperty(SqliteNativeLibrary.TMPDIR);
  }

  @AfterEach
  void restore() {
    System.clearProperty(SqliteNativeLibrary.TMPDIR);
    if (saved != null) {
      System.setProperty(SqliteNativeLibrary.TMPDIR, saved);
    }
  }

  @Test
  void whatKilledProcessesLeft_isDeleted_whatIsBeingExtractedNow_andOtherFilesStay() throws Exception {
    Path dir = root.resolve("native");
    Files.createDirectories(dir);
    Path oldLib = dir.resolve("sqlite-3.54.1.0-aaaa-libsqlitejdbc.so");
    Path oldLock = dir.resolve("sqlite-3.54.1.0-aaaa-libsqlitejdbc.so.lck");
    Path fresh = dir.resolve("sqlite-3.54.1.0-bbbb-libsqlitejdbc.so");
    Path other = dir.resolve("notes.txt");
    for (Path p : new Path[] {oldLib, oldLock, fresh, other}) {
      Files.write(p, new byte[] {1});
    }
    FileTime twoMinutesAgo = FileTime.from(Instant.now().minus(Duration.ofMinutes(2)));
    for (Path p : new Path[] {oldLib, oldLock, other}) {
      Files.setLastModifiedTime(p, twoMinutesAgo);
    }

    assertEquals(2, SqliteNativeLibrary.placeUnder(dir));

    assertFalse(Files.exists(oldLib));
    assertFalse(Files.exists(oldLock));
    assertTrue(Files.exists(fresh), "a process may be loading it now");
    assertTrue(Files.exists(other), "not the driver's");
    assertEquals(dir.toString(), System.getProperty(SqliteNativeLibrary.TMPDIR));
    assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(dir)));
  }

  @Test
  void aDirectoryAlreadyChosen_isKept_andNothingIsDeleted() throws Exception {
    System.setProperty(SqliteNativeLibrary.TMPDIR, "/somewhere/else");
    Path dir = root.resolve("native");
    Files.createDirectories(dir);
    Path oldLib = dir.resolve("sqlite-3.54.1.0-aaaa-libsqlitejdbc.so");
    Files.write(oldLib, new byte[] {1});
    Files.setLastModifiedTime(oldLib, FileTime.from(Instant.now().minus(Duration.ofHours(1))));

    assertEquals(0, SqliteNativeLibrary.placeUnder(dir));

    assertTrue(Files.exists(oldLib));
    assertEquals("/somewhere/else", System.getProperty(SqliteNativeLibrary.TMPDIR));
  }
}
