package dev.flatpull.manager;

import dev.flatpull.fuse.CpuPriority;
import dev.flatpull.fuse.Libc;
import dev.flatpull.fuse.LibcryptoSha256;

/**
 * The parts of a manager's start that cost the most and that nothing else waits on, begun on a thread of their own as
 * the process starts: while the main thread reads the configuration, binds its meters and opens the page cache, this
 * one binds libc (jnr-ffi generates the binding at run time: no class-data archive holds it) and reads the platform's
 * trust store (the registry clients' TLS), and lowers the JIT's optimizing compiler to the lowest CPU priority
 * ({@link CpuPriority}: its recompilations would otherwise take a starting service's CPU). A manager that replaces
 * one that died serves the running containers' mounts only after the first two, so they are on the pause every such
 * container sees. Then it installs libcrypto's SHA-256 ({@link LibcryptoSha256}).
 */
public final class BackgroundInit {
  private BackgroundInit() {}

  /**
   * Starts the work. A failure is printed here: the main thread meets it again where it needs the part, but a class
   * whose initialization failed on another thread no longer says why.
   */
  public static void start() {
    Thread t = new Thread(() -> {
      try {
        Libc.bindNow();
        CpuPriority.lowerOptimizingCompiler();
        javax.net.ssl.SSLContext.getDefault();
      } catch (java.security.GeneralSecurityException | LinkageError | RuntimeException e) {
        System.err.println("flatpull fuse-manager: initializing ahead failed: " + e);
        e.printStackTrace();
      }
      // After what a takeover waits for; before a pull's first TOC, most likely: the JDK's SHA-256 is slow until C2
      // has compiled it (a digest begun before this is the JDK's: the same bytes, slower).
      LibcryptoSha256.install();
    }, "flatpull-background-init");
    t.setDaemon(true);
    t.start();
  }
}
