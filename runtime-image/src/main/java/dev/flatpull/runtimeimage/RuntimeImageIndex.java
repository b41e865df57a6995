package dev.flatpull.runtimeimage;

import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.trace.ServiceVersion;
import java.time.Instant;
import java.util.List;
import java.util.Objects;

/**
 * What a runtime image holds and where: its frames, and per layer the extents of files (whole chunks, or pages in the
 * opt-in mode) with the frame and offset their content is stored at. Identical content is stored once, so several
 * extents (of other files, other layers) may name one place. Validated against itself at construction by
 * {@link RuntimeImageFormat}; against its image by {@link ImageBinding}.
 *
 * @param verify what the extents' content is checked against (the image's TOCs, or the digests in this index)
 * @param service the service version whose start-up was traced (its manifest digest is the image's)
 * @param flatpullVersion the building flatpull's version
 * @param createdAt when it was built
 * @param trace what the trace it was built from said
 * @param frames the zstd frames after the index, in blob order
 * @param layers per layer, in the image manifest's order of the layers traced
 */
public record RuntimeImageIndex(Verification verify, ServiceVersion service, String flatpullVersion, Instant createdAt,
    TraceSummary trace, List<Frame> frames, List<LayerExtents> layers) {
  public RuntimeImageIndex {
    Objects.requireNonNull(verify);
    Objects.requireNonNull(service);
    Objects.requireNonNull(flatpullVersion);
    Objects.requireNonNull(createdAt);
    Objects.requireNonNull(trace);
    frames = List.copyOf(frames);
    layers = List.copyOf(layers);
  }

  /** The image manifest this runtime image was built for. */
  public Digest manifestDigest() {
    return Digest.parse(service.manifestDigest());
  }

  /** The compressed bytes of all frames. */
  public long storedBytes() {
    return frames.stream().mapToLong(Frame::length).sum();
  }

  /** The decompressed bytes of all frames: the unique content. */
  public long contentBytes() {
    return frames.stream().mapToLong(Frame::size).sum();
  }

  /** Extents over all layers, counting each place content is served at (duplicates included). */
  public long extentCount() {
    return layers.stream().mapToLong(l -> l.extents().size()).sum();
  }

  /** The bytes served from this runtime image, counting shared content at each place it is served. */
  public long servedBytes() {
    return layers.stream().flatMap(l -> l.extents().stream()).mapToLong(Extent::length).sum();
  }

  /**
   * What the trace said.
   *
   * @param recordedAt when the recording finished
   * @param readyMillis time to ready of each recorded start
   * @param pages traced pages
   */
  public record TraceSummary(Instant recordedAt, List<Long> readyMillis, long pages) {
    public TraceSummary {
      Objects.requireNonNull(recordedAt);
      readyMillis = List.copyOf(readyMillis);
    }
  }

  /**
   * One independently decodable zstd frame.
   *
   * @param layer index into {@link #layers} of the layer whose content it holds
   * @param offset where it starts, counted from the end of the index
   * @param length its compressed length
   * @param size its decompressed length
   */
  public record Frame(int layer, long offset, int length, int size) {}

  /**
   * The content a runtime image serves of one layer, in first-access order.
   *
   * @param digest the layer's digest, as in the image manifest
   * @param files paths in the layer (absolute, as traces name them), referred to by index from the extents
   */
  public record LayerExtents(Digest digest, List<String> files, List<Extent> extents) {
    public LayerExtents {
      Objects.requireNonNull(digest);
      files = List.copyOf(files);
      extents = List.copyOf(extents);
    }
  }

  /**
   * {@code length} bytes of a file at {@code fileOffset}, stored at {@code frameOffset} of frame {@code frame}; they
   * hash to {@code digest} (a chunk digest of the layer's TOC in the default mode, a page digest otherwise).
   */
  public record Extent(int file, long fileOffset, int length, int frame, int frameOffset, Digest digest) {
    public long fileEnd() {
      return fileOffset + length;
    }
  }
}
