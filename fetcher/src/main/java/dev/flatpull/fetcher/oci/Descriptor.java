package dev.flatpull.fetcher.oci;

import dev.flatpull.core.Digest;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * An OCI content descriptor: what a manifest or index says about one blob or manifest it refers to.
 *
 * @param artifactType the artifact type of the manifest it refers to (an entry of a referrers index), if given
 */
public record Descriptor(
    String mediaType, Digest digest, long size, Map<String, String> annotations, Optional<Platform> platform,
    Optional<String> artifactType) {
  public Descriptor {
    Objects.requireNonNull(mediaType);
    Objects.requireNonNull(digest);
    if (size < 0) {
      throw new IllegalArgumentException("descriptor size is negative: " + size);
    }
    annotations = Map.copyOf(annotations);
    Objects.requireNonNull(platform);
    Objects.requireNonNull(artifactType);
  }

  public Descriptor(String mediaType, Digest digest, long size, Map<String, String> annotations,
      Optional<Platform> platform) {
    this(mediaType, digest, size, annotations, platform, Optional.empty());
  }

  public Descriptor(String mediaType, Digest digest, long size, Map<String, String> annotations) {
    this(mediaType, digest, size, annotations, Optional.empty(), Optional.empty());
  }

  public Optional<String> annotation(String key) {
    return Optional.ofNullable(annotations.get(key));
  }

  /** This descriptor as an entry of a referrers index: with the referrer's artifact type. */
  public Descriptor withArtifactType(String type) {
    return new Descriptor(mediaType, digest, size, annotations, platform, Optional.of(type));
  }
}
