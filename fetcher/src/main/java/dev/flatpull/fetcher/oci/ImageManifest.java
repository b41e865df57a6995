package dev.flatpull.fetcher.oci;

import dev.flatpull.core.Digest;
import java.util.List;
import java.util.Map;

/** An OCI image manifest or Docker schema 2 manifest. */
public record ImageManifest(
    String mediaType, Digest digest, byte[] raw, Descriptor config, List<Descriptor> layers,
    Map<String, String> annotations)
    implements OciDocument {
  public ImageManifest {
    layers = List.copyOf(layers);
    annotations = Map.copyOf(annotations);
  }
}
