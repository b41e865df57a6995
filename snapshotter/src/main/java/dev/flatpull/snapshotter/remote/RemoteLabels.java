package dev.flatpull.snapshotter.remote;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.reference.ImageReference;
import java.util.Map;
import java.util.Optional;

/**
 * The labels with which containerd asks a remote snapshotter for a layer: CRI's (set by containerd's CRI plugin unless
 * {@code disable_snapshot_annotations = true}) or stargz-snapshotter's (set by {@code ctr-remote image rpull}).
 *
 * @param image the image the layer belongs to
 * @param layer the layer's (compressed) digest
 * @param manifest the image manifest's digest, when the labels carry it
 */
public record RemoteLabels(ImageReference image, Digest layer, Optional<Digest> manifest) {
  public static final String CRI_IMAGE_REF = "containerd.io/snapshot/cri.image-ref";
  public static final String CRI_LAYER_DIGEST = "containerd.io/snapshot/cri.layer-digest";
  public static final String CRI_MANIFEST_DIGEST = "containerd.io/snapshot/cri.manifest-digest";
  public static final String CRI_IMAGE_LAYERS = "containerd.io/snapshot/cri.image-layers";
  public static final String STARGZ_REFERENCE = "containerd.io/snapshot/remote/stargz.reference";
  public static final String STARGZ_DIGEST = "containerd.io/snapshot/remote/stargz.digest";
  public static final String STARGZ_LAYERS = "containerd.io/snapshot/remote/stargz.layers";

  /**
   * The remote layer {@code labels} ask for; empty when they ask for none (an ordinary pull).
   *
   * @throws IllegalArgumentException when they ask for one but a reference or digest is malformed
   */
  public static Optional<RemoteLabels> parse(Map<String, String> labels) {
    String ref = labels.get(CRI_IMAGE_REF);
    String layer = labels.get(CRI_LAYER_DIGEST);
    if (ref == null || layer == null) {
      ref = labels.get(STARGZ_REFERENCE);
      layer = labels.get(STARGZ_DIGEST);
    }
    if (ref == null && layer == null) {
      return Optional.empty();
    }
    if (ref == null || ref.isBlank() || layer == null || layer.isBlank()) {
      throw new IllegalArgumentException("remote labels name " + (ref == null || ref.isBlank() ? "no image" : "no layer"));
    }
    ImageReference image = ImageReference.parse(ref);
    Digest layerDigest = Digest.parse(layer);
    String manifest = labels.get(CRI_MANIFEST_DIGEST);
    return Optional.of(new RemoteLabels(image, layerDigest,
        manifest == null || manifest.isBlank() ? Optional.empty() : Optional.of(Digest.parse(manifest))));
  }
}
