package dev.flatpull.snapshotter.store;

import java.util.Objects;

/**
 * Where a remote snapshot's layer comes from, stored with the snapshot so that it can be mounted again after a restart
 * without asking the registry for the manifest.
 *
 * @param imageRef the image reference, with a digest when known
 * @param descriptorJson the layer's OCI descriptor, as JSON
 */
public record RemoteSource(String imageRef, String descriptorJson) {
  public RemoteSource {
    Objects.requireNonNull(imageRef);
    Objects.requireNonNull(descriptorJson);
  }
}
