package dev.flatpull.fetcher.oci;

import dev.flatpull.core.Digest;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * An OCI image manifest or Docker schema 2 manifest. An OCI 1.1 artifact is an image manifest too: it names its
 * {@code artifactType}, and a {@code subject} when it refers to another manifest (a referrer).
 */
public record ImageManifest(
    String mediaType, Digest digest, byte[] raw, Descriptor config, List<Descriptor> layers,
    Map<String, String> annotations, Optional<String> artifactType, Optional<Descriptor> subject)
    implements OciDocument {
  public ImageManifest {
    layers = List.copyOf(layers);
    annotations = Map.copyOf(annotations);
    java.util.Objects.requireNonNull(artifactType);
    java.util.Objects.requireNonNull(subject);
  }
}
