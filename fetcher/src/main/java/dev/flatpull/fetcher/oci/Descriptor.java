package dev.flatpull.fetcher.oci;

import dev.flatpull.core.Digest;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/** An OCI content descriptor: what a manifest or index says about one blob or manifest it refers to. */
public record Descriptor(
    String mediaType, Digest digest, long size, Map<String, String> annotations, Optional<Platform> platform) {
  public Descriptor {
    Objects.requireNonNull(mediaType);
    Objects.requireNonNull(digest);
    if (size < 0) {
      throw new IllegalArgumentException("descriptor size is negative: " + size);
    }
    annotations = Map.copyOf(annotations);
    Objects.requireNonNull(platform);
  }

  public Descriptor(String mediaType, Digest digest, long size, Map<String, String> annotations) {
    this(mediaType, digest, size, annotations, Optional.empty());
  }

  public Optional<String> annotation(String key) {
    return Optional.ofNullable(annotations.get(key));
  }
}
