package dev.flatpull.runtimeimage;

import com.github.luben.zstd.Zstd;
import dev.flatpull.config.RuntimeImageSettings.Limits;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.runtimeimage.RuntimeImageFormat.Layout;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Frame;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * What a runtime image of one image may ask of a node, derived from the image's own TOCs (docs/runtime-images.md,
 * "Limits"): a runtime image comes from whoever can push to the repository, so its index, blob and frames are checked
 * against what the image makes possible before the node spends memory or bandwidth on them. An index holds at most one
 * extent per chunk of the TOCs (per page in page mode), so its size is bounded by theirs; a blob holds its header,
 * its index and its frames, nothing more; a frame holds the extents it carries, plus a small slack; and a runtime
 * image brings a start-up working set, not the image. Immutable.
 */
public final class RuntimeImageBounds {
  // The index's fixed part (format, service, trace summary, statistics) and a layer's (digest, arrays).
  private static final long INDEX_BASE = 64 << 10;
  private static final long PER_LAYER = 256;
  // A path in a layer's file table: its quotes and comma beside the name.
  private static final long PER_PATH = 16;

  private final Limits limits;
  private final long indexBytes;
  private final long imageBytes;

  private RuntimeImageBounds(Limits limits, long indexBytes, long imageBytes) {
    this.limits = limits;
    this.indexBytes = indexBytes;
    this.imageBytes = imageBytes;
  }

  /** The bounds for runtime images verified as {@code verify} of an image whose layers' verified TOCs these are. */
  public static RuntimeImageBounds of(Limits limits, Verification verify, Collection<LayerIndex> layers) {
    long index = INDEX_BASE;
    long image = 0;
    for (LayerIndex layer : layers) {
      index += PER_LAYER;
      // By entry number, from the index's records: no entry is made but a hard link's target.
      for (int i = 0; i < layer.entryCount(); i++) {
        EntryType type = layer.typeAt(i);
        long size;
        long chunks;
        if (type == EntryType.REG) {
          size = layer.sizeAt(i);
          chunks = layer.chunkCountAt(i);
          image += size;
        } else if (type == EntryType.HARDLINK) {
          LayerEntry content = layer.contentOf(layer.entryAt(i));
          if (content.type() != EntryType.REG) {
            continue;
          }
          size = content.size();
          chunks = content.chunks().size();
        } else {
          continue;
        }
        long extents = verify == Verification.IMAGE ? chunks
            : (size + RuntimeImageFormat.PAGE_SIZE - 1) / RuntimeImageFormat.PAGE_SIZE;
        // The name's bytes: at least its characters, so the bound only grows.
        index += PER_PATH + layer.nameLengthAt(i) + extents * limits.indexBytesPerExtent();
      }
    }
    return new RuntimeImageBounds(limits, Math.min(index, RuntimeImageFormat.MAX_INDEX_BYTES), image);
  }

  /** The largest index, decompressed. */
  public long indexBytes() {
    return indexBytes;
  }

  /** The largest index as stored: zstd's bound for the largest decompressed one. */
  public long indexLength() {
    return Math.min(Zstd.compressBound(indexBytes), RuntimeImageFormat.MAX_INDEX_BYTES);
  }

  /** The bytes of the image's regular files. */
  public long imageBytes() {
    return imageBytes;
  }

  /** Where the index ends in a blob at most (header and largest stored index). */
  public long indexEnd() {
    return RuntimeImageFormat.HEADER_SIZE + indexLength();
  }

  /** Refuses an index stored in more than {@link #indexLength} bytes, before it is read. */
  public void checkIndexLength(long length) throws RuntimeImageLimitException {
    if (length > indexLength()) {
      throw new RuntimeImageLimitException("index_size", "the index is stored in " + length + " bytes, more than the "
          + indexLength() + " an index of this image's TOCs can need ([runtime_image] index_bytes_per_extent = "
          + limits.indexBytesPerExtent() + ")");
    }
  }

  /** Refuses a blob whose size is not what its index describes: the stream would bring what no frame holds. */
  public void checkBlob(Layout layout, long blobSize) throws RuntimeImageLimitException {
    if (blobSize != layout.blobSize()) {
      throw new RuntimeImageLimitException("blob_size", "the blob is " + blobSize + " bytes, its index describes "
          + layout.blobSize() + " (header, index and frames)");
    }
  }

  /**
   * Refuses an index whose frames hold more than the extents they carry (plus {@code frame_slack}), or whose content
   * is more of the image than a working set ({@code max_share}).
   *
   * @param byFrame the extents of each frame, as {@link RuntimeImageDecoder#extentsByFrame} gives them
   * @return the bytes its extents bring
   */
  public long checkContent(RuntimeImageIndex index, List<List<int[]>> byFrame) throws RuntimeImageLimitException {
    return checkContent(index, byFrame, 1);
  }

  /**
   * The same for an index whose frames may carry content it does not serve, as long as at least {@code minUse} of
   * each frame it fetches is served: a borrowed runtime image ({@link BorrowedIndex#MIN_FRAME_USE}).
   */
  public long checkContent(RuntimeImageIndex index, List<List<int[]>> byFrame, double minUse)
      throws RuntimeImageLimitException {
    long brought = checkFrames(index, byFrame, limits, minUse);
    // What its extents bring (frames without any are never fetched), against the image's files.
    if (brought > limits.maxShare() * imageBytes) {
      double share = imageBytes == 0 ? 1 : (double) brought / imageBytes;
      throw new RuntimeImageLimitException("working_set", String.format(java.util.Locale.ROOT,
          "the runtime image brings %d bytes, %.2f of the image's %d: more than a start-up working set"
              + " ([runtime_image] max_share = %.2f)", brought, share, imageBytes, limits.maxShare()));
    }
    return brought;
  }

  /**
   * Refuses an index whose frames hold more than the extents they carry (plus {@code frame_slack}): a check that
   * needs no TOC.
   *
   * @return the bytes its extents bring
   */
  static long checkFrames(RuntimeImageIndex index, List<List<int[]>> byFrame, Limits limits)
      throws RuntimeImageLimitException {
    return checkFrames(index, byFrame, limits, 1);
  }

  private static long checkFrames(RuntimeImageIndex index, List<List<int[]>> byFrame, Limits limits, double minUse)
      throws RuntimeImageLimitException {
    long brought = 0;
    for (int f = 0; f < byFrame.size(); f++) {
      if (byFrame.get(f).isEmpty()) {
        continue; // never fetched
      }
      Frame frame = index.frames().get(f);
      long carried = 0;
      Set<Long> places = new HashSet<>();
      for (int[] le : byFrame.get(f)) {
        Extent e = index.layers().get(le[0]).extents().get(le[1]);
        if (places.add(((long) e.frameOffset() << 32) | e.length())) {
          carried += e.length();
        }
      }
      if (frame.size() > (long) Math.ceil(carried / minUse) + limits.frameSlack()
          || frame.length() > Zstd.compressBound(frame.size()) + limits.frameSlack()) {
        throw new RuntimeImageLimitException("frame_size", "index.frames[" + f + "]: " + frame.length() + " bytes"
            + " decompressing to " + frame.size() + ", for extents of " + carried + " bytes ([runtime_image]"
            + " frame_slack = " + limits.frameSlack() + ")");
      }
      brought += carried;
    }
    return brought;
  }

  /**
   * How close a runtime image whose index is stored in {@code indexLength} bytes and whose extents bring
   * {@code brought} bytes came to the bounds, for the log.
   */
  public String headroom(long indexLength, long brought) {
    return String.format(java.util.Locale.ROOT, "index %d of at most %d bytes stored, brings %.3f of the image's"
        + " %d bytes (at most %.2f)", indexLength, indexLength(), imageBytes == 0 ? 0 : (double) brought / imageBytes,
        imageBytes, limits.maxShare());
  }
}
