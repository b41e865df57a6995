package dev.flatpull.fetcher.oci;

import java.util.Locale;
import java.util.Optional;

/** An image platform ({@code os/architecture[/variant]}), as in an index entry. */
public record Platform(String os, String architecture, Optional<String> variant) {

  /** The platform this JVM runs on, in Go's naming ({@code amd64}, {@code arm64}). */
  public static Platform current() {
    String arch = System.getProperty("os.arch").toLowerCase(Locale.ROOT);
    String goArch =
        switch (arch) {
          case "x86_64", "amd64" -> "amd64";
          case "aarch64", "arm64" -> "arm64";
          case "ppc64le" -> "ppc64le";
          case "s390x" -> "s390x";
          default -> arch;
        };
    return new Platform("linux", goArch, goArch.equals("arm64") ? Optional.of("v8") : Optional.empty());
  }

  /** Parses {@code os/arch[/variant]}. */
  public static Platform parse(String text) {
    String[] parts = text.split("/");
    if (parts.length < 2 || parts.length > 3 || parts[0].isEmpty() || parts[1].isEmpty()) {
      throw new IllegalArgumentException("invalid platform '" + text + "': expected os/arch[/variant]");
    }
    return new Platform(parts[0], parts[1], parts.length == 3 ? Optional.of(parts[2]) : Optional.empty());
  }

  /** Whether an index entry's platform can run here: same os and architecture, and a compatible variant. */
  public boolean matches(Platform candidate) {
    if (!os.equals(candidate.os) || !architecture.equals(candidate.architecture)) {
      return false;
    }
    // arm64 images usually omit the variant; treat an absent variant as the default one.
    return variant.isEmpty() || candidate.variant.isEmpty() || variant.equals(candidate.variant);
  }

  @Override
  public String toString() {
    return os + "/" + architecture + variant.map(v -> "/" + v).orElse("");
  }
}
