package dev.flatpull.fetcher.layer;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.util.Map;
import java.util.Optional;

/**
 * Where an eStargz layer's TOC starts and how long its blob is, as the label {@link LayerFormat#ESTARGZ_TAIL_LABEL}
 * carries them to a snapshotter's Prepare: with the layer's digest and TOC digest (labels too), enough to fetch and
 * verify the TOC before the image's manifest is read. The descriptor made of them stands in for the manifest's only
 * until that is read: {@link #describes} must then hold.
 */
public record EstargzTail(long tocOffset, long blobSize) {
  public EstargzTail {
    if (tocOffset < 0 || blobSize < 0 || tocOffset >= blobSize) {
      throw new IllegalArgumentException("TOC offset " + tocOffset + " outside a blob of " + blobSize + " bytes");
    }
  }

  /** The label's value; empty when it is absent or malformed (a hint: without it, the TOC waits for the manifest). */
  public static Optional<EstargzTail> parse(String label) {
    if (label == null) {
      return Optional.empty();
    }
    int colon = label.indexOf(':');
    try {
      return Optional.of(new EstargzTail(Long.parseLong(label.substring(0, colon)),
          Long.parseLong(label.substring(colon + 1))));
    } catch (IndexOutOfBoundsException | IllegalArgumentException malformed) {
      return Optional.empty();
    }
  }

  public String label() {
    return tocOffset + ":" + blobSize;
  }

  /** The descriptor the manifest is expected to give layer {@code layer}, whose TOC hashes to {@code toc}. */
  public Descriptor descriptor(Digest layer, Digest toc) {
    return new Descriptor(MediaTypes.OCI_LAYER_GZIP, layer, blobSize, Map.of(LayerFormat.ESTARGZ_TOC_DIGEST,
        toc.toString(), LayerFormat.ESTARGZ_TOC_OFFSET, Long.toString(tocOffset)));
  }

  /**
   * Whether a TOC read through {@code expected} (from {@link #descriptor}) is the one {@code actual}, the manifest's
   * descriptor, names: the same blob, size and TOC digest, so the same verified index.
   */
  public static boolean describes(Descriptor expected, Descriptor actual) {
    return expected.digest().equals(actual.digest()) && expected.size() == actual.size()
        && expected.annotation(LayerFormat.ESTARGZ_TOC_DIGEST).equals(actual.annotation(LayerFormat.ESTARGZ_TOC_DIGEST))
        && estargz(actual);
  }

  private static boolean estargz(Descriptor d) {
    try {
      return LayerFormat.of(d) == LayerFormat.ESTARGZ;
    } catch (java.io.IOException unsupported) {
      return false;
    }
  }
}
