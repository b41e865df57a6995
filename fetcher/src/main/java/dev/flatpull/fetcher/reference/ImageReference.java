package dev.flatpull.fetcher.reference;

import dev.flatpull.core.Digest;
import java.util.Objects;
import java.util.Optional;
import java.util.regex.Pattern;

/**
 * A parsed image reference {@code [REGISTRY/]REPOSITORY[:TAG][@DIGEST]}, normalised as docker and containerd do: no
 * registry means {@code docker.io}, a one-component Docker Hub repository gains {@code library/}, and a reference
 * with neither tag nor digest means {@code :latest}.
 */
public record ImageReference(String registry, String repository, Optional<String> tag, Optional<Digest> digest) {
  private static final Pattern COMPONENT = Pattern.compile("[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*");
  private static final Pattern TAG = Pattern.compile("[\\w][\\w.-]{0,127}");
  private static final Pattern HOST = Pattern.compile("[A-Za-z0-9.-]+(?::\\d+)?|\\[[0-9A-Fa-f:]+\\](?::\\d+)?");

  public ImageReference {
    Objects.requireNonNull(registry);
    Objects.requireNonNull(repository);
    Objects.requireNonNull(tag);
    Objects.requireNonNull(digest);
  }

  /**
   * Parses and normalises a reference.
   *
   * @throws IllegalArgumentException naming the reference and what is wrong with it
   */
  public static ImageReference parse(String text) {
    Objects.requireNonNull(text, "reference");
    String rest = text;
    Optional<Digest> digest = Optional.empty();
    int at = rest.indexOf('@');
    if (at >= 0) {
      try {
        digest = Optional.of(Digest.parse(rest.substring(at + 1)));
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("invalid image reference '" + text + "': " + e.getMessage(), e);
      }
      rest = rest.substring(0, at);
    }
    Optional<String> tag = Optional.empty();
    int colon = rest.lastIndexOf(':');
    if (colon > rest.lastIndexOf('/')) {
      tag = Optional.of(rest.substring(colon + 1));
      rest = rest.substring(0, colon);
      if (!TAG.matcher(tag.get()).matches()) {
        throw new IllegalArgumentException("invalid image reference '" + text + "': bad tag '" + tag.get() + "'");
      }
    }
    String registry = "docker.io";
    int slash = rest.indexOf('/');
    if (slash > 0) {
      String first = rest.substring(0, slash);
      if (first.contains(".") || first.contains(":") || first.equals("localhost") || first.startsWith("[")) {
        registry = first;
        rest = rest.substring(slash + 1);
      }
    }
    if (registry.equals("index.docker.io") || registry.equals("registry-1.docker.io")) {
      registry = "docker.io";
    }
    if (!HOST.matcher(registry).matches()) {
      throw new IllegalArgumentException("invalid image reference '" + text + "': bad registry '" + registry + "'");
    }
    if (rest.isEmpty()) {
      throw new IllegalArgumentException("invalid image reference '" + text + "': no repository");
    }
    for (String component : rest.split("/", -1)) {
      if (!COMPONENT.matcher(component).matches()) {
        throw new IllegalArgumentException(
            "invalid image reference '" + text + "': bad repository component '" + component + "'");
      }
    }
    if (registry.equals("docker.io") && !rest.contains("/")) {
      rest = "library/" + rest;
    }
    if (tag.isEmpty() && digest.isEmpty()) {
      tag = Optional.of("latest");
    }
    return new ImageReference(registry, rest, tag, digest);
  }

  /** What to ask the registry for: the digest when there is one (it pins the content), else the tag. */
  public String manifestReference() {
    return digest.map(Digest::toString).orElseGet(tag::orElseThrow);
  }

  /** The same repository at another tag (and no digest). */
  public ImageReference withTag(String newTag) {
    return new ImageReference(registry, repository, Optional.of(newTag), Optional.empty());
  }

  /** The same repository pinned to a digest. */
  public ImageReference withDigest(Digest d) {
    return new ImageReference(registry, repository, tag, Optional.of(d));
  }

  @Override
  public String toString() {
    return registry + "/" + repository + tag.map(t -> ":" + t).orElse("") + digest.map(d -> "@" + d).orElse("");
  }
}
