package dev.flatpull.snapshotter.remote;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.EstargzTail;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.oci.Descriptor;
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
 * @param described the layer as the labels describe it, when they say enough to open its TOC before the manifest is
 *     read: containerd passes a layer's annotations under {@code containerd.io/snapshot/} as labels, among them an
 *     eStargz layer's TOC digest and, from flatpull's converter, {@link LayerFormat#ESTARGZ_TAIL_LABEL}
 */
public record RemoteLabels(ImageReference image, Digest layer, Optional<Digest> manifest,
    Optional<Descriptor> described) {
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
        manifest == null || manifest.isBlank() ? Optional.empty() : Optional.of(Digest.parse(manifest)),
        described(layerDigest, labels)));
  }

  /** A hint, never a refusal: labels that do not describe the layer well leave its TOC to wait for the manifest. */
  private static Optional<Descriptor> described(Digest layer, Map<String, String> labels) {
    Optional<EstargzTail> tail = EstargzTail.parse(labels.get(LayerFormat.ESTARGZ_TAIL_LABEL));
    String toc = labels.get(LayerFormat.ESTARGZ_TOC_DIGEST);
    if (tail.isEmpty() || toc == null) {
      return Optional.empty();
    }
    try {
      return Optional.of(tail.get().descriptor(layer, Digest.parse(toc)));
    } catch (IllegalArgumentException malformed) {
      return Optional.empty();
    }
  }
}
