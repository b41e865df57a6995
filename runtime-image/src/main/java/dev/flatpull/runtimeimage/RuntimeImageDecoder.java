package dev.flatpull.runtimeimage;

import com.github.luben.zstd.ZstdDecompressCtx;
import com.github.luben.zstd.ZstdException;
import dev.flatpull.core.Digest;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.VerifiedContent;
import dev.flatpull.runtimeimage.RuntimeImageFormat.Layout;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Frame;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Yields the content of a runtime image, extent by extent, each verified against the digest its {@link ImageBinding}
 * requires. An extent whose bytes do not verify, or whose frame does not decompress to the size the index gives, is
 * rejected and reported, never passed on: the caller falls back to the lazy loader for it. Frames are decoded one at a
 * time, so memory holds one frame, not the blob's content. One frame is decoded by {@link #decodeFrame}, for a blob
 * in memory and for a stream alike, into {@link Scratch} buffers reused from frame to frame: only the extents passed
 * on are new arrays.
 */
public final class RuntimeImageDecoder {
  private RuntimeImageDecoder() {}

  /** Receives verified content. */
  @FunctionalInterface
  public interface Sink {
    /**
     * @param layer the layer's index in the runtime image's index
     * @param extent the extent's index in its layer
     */
    void accept(int layer, int extent, VerifiedContent content) throws IOException;
  }

  /** Why content was not passed on: a bounded set, so that it can tag metrics. */
  public enum RejectionKind {
    /** The frame did not decompress, or not to the size the index gives. */
    BAD_FRAME("bad_frame"),
    /** The extent's bytes do not hash to the digest the binding requires. */
    BAD_EXTENT("bad_extent"),
    /** The frame is not in the bytes that arrived (a truncated blob or a failed stream). */
    MISSING_FRAME("missing_frame");

    private final String key;

    RejectionKind(String key) {
      this.key = key;
    }

    public String key() {
      return key;
    }
  }

  /** An extent that was not passed on, and why. */
  public record Rejection(RejectionKind kind, String where, String reason) {}

  /** How decoding went. */
  public record Result(long accepted, long acceptedBytes, List<Rejection> rejected) {
    public Result {
      rejected = List.copyOf(rejected);
    }
  }

  /**
   * What decoding frames one after another reuses: a zstd context, and buffers for a frame's compressed and
   * decompressed bytes that grow to the largest frame (at most {@link RuntimeImageFormat#MAX_FRAME_BYTES} each).
   * Allocating and zeroing both per frame cost as much as decompressing it. One thread at a time; close it.
   */
  public static final class Scratch implements AutoCloseable {
    private final ZstdDecompressCtx zstd = new ZstdDecompressCtx();
    private byte[] compressed = new byte[0];
    private byte[] content = new byte[0];

    /** A buffer of at least {@code n} bytes for a frame's compressed bytes (its contents are not kept). */
    public byte[] compressed(int n) {
      if (compressed.length < n) {
        compressed = new byte[n];
      }
      return compressed;
    }

    byte[] content(int n) {
      if (content.length < n) {
        content = new byte[n];
      }
      return content;
    }

    @Override
    public void close() {
      zstd.close();
    }
  }

  /** The extents of each frame, as (layer, extent) index pairs, in the order of the index. */
  public static List<List<int[]>> extentsByFrame(RuntimeImageIndex index) {
    List<List<int[]>> byFrame = new ArrayList<>();
    for (int f = 0; f < index.frames().size(); f++) {
      byFrame.add(new ArrayList<>());
    }
    for (int l = 0; l < index.layers().size(); l++) {
      List<Extent> extents = index.layers().get(l).extents();
      for (int j = 0; j < extents.size(); j++) {
        byFrame.get(extents.get(j).frame()).add(new int[] {l, j});
      }
    }
    return byFrame;
  }

  /**
   * Decodes {@code blob} (all of it, or any prefix: extents of frames it does not hold are rejected as missing)
   * laid out as {@code layout}.
   */
  public static Result decode(Layout layout, byte[] blob, ImageBinding binding, Sink sink) throws IOException {
    RuntimeImageIndex index = layout.index();
    List<List<int[]>> byFrame = extentsByFrame(index);
    long accepted = 0;
    long bytes = 0;
    List<Rejection> rejected = new ArrayList<>();
    try (Scratch scratch = new Scratch()) {
      for (int f = 0; f < index.frames().size(); f++) {
        if (byFrame.get(f).isEmpty()) {
          continue;
        }
        Frame frame = index.frames().get(f);
        long start = layout.frameStart(f);
        boolean held = start + frame.length() <= blob.length;
        long[] done = decodeFrame(layout, f, held ? blob : null, (int) start, scratch, binding, byFrame.get(f), sink,
            rejected, "is missing from the blob (" + blob.length + " bytes)");
        accepted += done[0];
        bytes += done[1];
      }
    }
    return new Result(accepted, bytes, rejected);
  }

  /**
   * Decodes frame {@code f} from its compressed bytes at {@code offset} of {@code src} ({@code null} when they did not
   * arrive, then its extents are rejected as missing, {@code why} saying why), verifies each extent of it and passes
   * the verified ones to {@code sink}; rejections are added to {@code rejected}.
   *
   * @return extents and bytes passed on
   */
  public static long[] decodeFrame(Layout layout, int f, byte[] src, int offset, Scratch scratch, ImageBinding binding,
      List<int[]> extents, Sink sink, List<Rejection> rejected, String why) throws IOException {
    RuntimeImageIndex index = layout.index();
    Frame frame = index.frames().get(f);
    long start = layout.frameStart(f);
    byte[] content = null;
    String failure = null;
    RejectionKind kind = RejectionKind.BAD_FRAME;
    if (src == null) {
      kind = RejectionKind.MISSING_FRAME;
      failure = "frame " + f + " (bytes " + start + ".." + (start + frame.length()) + ") " + why;
    } else {
      try {
        content = scratch.content(frame.size());
        scratch.zstd.reset();
        int n = scratch.zstd.decompressByteArray(content, 0, frame.size(), src, offset, frame.length());
        if (n != frame.size()) {
          failure = "frame " + f + " decompressed to " + n + " bytes, the index says " + frame.size();
        }
      } catch (ZstdException | ArrayIndexOutOfBoundsException e) {
        failure = "frame " + f + " at byte " + start + " does not decompress: " + e.getMessage();
      }
    }
    long accepted = 0;
    long bytes = 0;
    for (int[] le : extents) {
      LayerExtents layer = index.layers().get(le[0]);
      Extent e = layer.extents().get(le[1]);
      if (failure != null) {
        rejected.add(new Rejection(kind, where(layer, e), failure));
        continue;
      }
      byte[] slice = Arrays.copyOfRange(content, e.frameOffset(), e.frameOffset() + e.length());
      Digest expected = binding.expected(le[0], le[1]);
      VerifiedContent verified;
      try {
        verified = VerifiedContent.check(expected, "a runtime-image extent", slice);
      } catch (DigestMismatchException m) {
        rejected.add(new Rejection(RejectionKind.BAD_EXTENT, where(layer, e), m.getMessage()));
        continue;
      }
      sink.accept(le[0], le[1], verified);
      accepted++;
      bytes += slice.length;
    }
    return new long[] {accepted, bytes};
  }

  /** Where an extent is, for a rejection: built only then (a stream passes thousands of extents a second). */
  static String where(LayerExtents layer, Extent e) {
    return "layer " + layer.digest().shortHex() + " " + layer.files().get(e.file()) + " [" + e.fileOffset() + ", "
        + e.fileEnd() + ")";
  }
}
