package dev.flatpull.it.bench;

/**
 * SHA-256 as the FUSE manager of the build on the classpath has it, for a benchmark that stands in for the manager:
 * libcrypto's where that build installs it ({@code LibcryptoSha256}), else the JDK's. By name, so that a baseline build
 * without the class (a benchmark's {@code --baseline-root}) runs too.
 */
final class ManagerHashing {
  private ManagerHashing() {}

  /** Installs it; returns which it is, for the benchmark's output. */
  static String install() {
    try {
      if ((boolean) Class.forName("dev.flatpull.fuse.LibcryptoSha256").getMethod("install").invoke(null)) {
        return "SHA-256: libcrypto's, as in this build's FUSE manager";
      }
    } catch (ReflectiveOperationException notInThisBuild) {
      // the JDK's
    }
    return "SHA-256: the JDK's, as in this build's FUSE manager";
  }
}
