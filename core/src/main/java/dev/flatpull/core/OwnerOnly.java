package dev.flatpull.core;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;

/**
 * Modes for the state flatpull keeps as root: directories 0700 and files 0600, whatever the umask, as containerd keeps
 * its own since CVE-2021-41103 (a umask of 022 let any local user walk into container upper directories and layer trees
 * and run the setuid binaries of images there). A directory that exists already is corrected, so that a root created
 * by an older version is closed at the next start.
 */
public final class OwnerOnly {
  private static final Set<PosixFilePermission> DIRECTORY = PosixFilePermissions.fromString("rwx------");
  private static final Set<PosixFilePermission> FILE = PosixFilePermissions.fromString("rw-------");

  private OwnerOnly() {}

  /** {@code dir} and its missing parents created, and {@code dir} itself made 0700. */
  public static Path directory(Path dir) throws IOException {
    Files.createDirectories(dir);
    Files.setPosixFilePermissions(dir, DIRECTORY);
    return dir;
  }

  /** The attribute that creates a file 0600 (with {@code CREATE_NEW}, or {@link Files#createTempFile}). */
  public static FileAttribute<Set<PosixFilePermission>> file() {
    return PosixFilePermissions.asFileAttribute(FILE);
  }

  /** {@code file}, which exists, made 0600. */
  public static Path fileMode(Path file) throws IOException {
    Files.setPosixFilePermissions(file, FILE);
    return file;
  }
}
