package dev.flatpull.core;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.util.concurrent.TimeUnit;

/**
 * The host's own tools that flatpull runs: mount(8), umount(8), fusermount. One way to run them, so that each fails
 * alike, with the command and its output.
 */
public final class HostCommand {
  private HostCommand() {}

  /**
   * Runs {@code command} and waits for it (at most 30 seconds once its output has ended).
   *
   * @throws IOException naming the command and carrying its output when it fails or does not end
   */
  public static void run(String... command) throws IOException {
    try {
      Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
      // Read before waiting: a command that fills the pipe would otherwise never end.
      String out = new String(p.getInputStream().readAllBytes());
      if (!p.waitFor(30, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        throw new IOException(String.join(" ", command) + " did not end: " + out.trim());
      }
      if (p.exitValue() != 0) {
        throw new IOException(String.join(" ", command) + " failed: " + out.trim());
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException(String.join(" ", command) + " interrupted");
    }
  }
}
