package dev.flatpull.fetcher.oci;

import dev.flatpull.core.Digest;
import java.util.List;
import java.util.Optional;

/** An OCI image index or Docker manifest list. */
public record ImageIndex(String mediaType, Digest digest, byte[] raw, List<Descriptor> manifests)
    implements OciDocument {
  public ImageIndex {
    manifests = List.copyOf(manifests);
  }

  /** The first image manifest whose platform matches {@code wanted}, in index order. */
  public Optional<Descriptor> select(Platform wanted) {
    return manifests.stream()
        .filter(d -> MediaTypes.isManifest(d.mediaType()))
        .filter(d -> d.platform().map(wanted::matches).orElse(false))
        .findFirst();
  }
}
