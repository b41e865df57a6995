package dev.flatpull.trace;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.List;
import java.util.Objects;

/**
 * What a trace belongs to: the same image started differently reads different pages, so the command, arguments,
 * environment, working directory and probes are part of the key, not just the image.
 *
 * @param image the image reference as given
 * @param manifestDigest the image manifest's digest (the platform's manifest when the reference names an index)
 * @param platform OS/ARCH[/VARIANT]
 * @param command the command and its arguments; empty for the image's default
 * @param environment the names of the extra environment variables, in the order given: never their values, which may
 *     be secrets (a token a CI job starts the service with) and would be published in the runtime image's index; a
 *     hash of a short value in the key could be brute-forced, so the key covers names only ({@link #names})
 * @param workingDirectory empty for the image's default
 * @param probes the readiness probes, as given
 */
public record ServiceVersion(String image, String manifestDigest, String platform, List<String> command,
    List<String> environment, String workingDirectory, List<String> probes) {
  public ServiceVersion {
    Objects.requireNonNull(image);
    Objects.requireNonNull(manifestDigest);
    Objects.requireNonNull(platform);
    command = List.copyOf(command);
    environment = List.copyOf(environment);
    Objects.requireNonNull(workingDirectory);
    probes = List.copyOf(probes);
  }

  /** The names of {@code NAME=VALUE} settings, in order: what a service version records of its environment. */
  public static List<String> names(List<String> environment) {
    return environment.stream().map(e -> e.indexOf('=') < 0 ? e : e.substring(0, e.indexOf('='))).toList();
  }

  /**
   * A digest of everything that decides what is read: the manifest digest (not the tag, which moves), platform,
   * command, environment (names), working directory and probes. Each field is length-prefixed, so no two keys collide by
   * concatenation.
   */
  public String key() {
    StringBuilder b = new StringBuilder();
    field(b, manifestDigest);
    field(b, platform);
    b.append(command.size()).append(';');
    command.forEach(c -> field(b, c));
    b.append(environment.size()).append(';');
    environment.forEach(e -> field(b, e));
    field(b, workingDirectory);
    b.append(probes.size()).append(';');
    probes.forEach(p -> field(b, p));
    try {
      return "sha256:" + HexFormat.of().formatHex(
          MessageDigest.getInstance("SHA-256").digest(b.toString().getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  private static void field(StringBuilder b, String s) {
    b.append(s.length()).append(':').append(s);
  }
}
