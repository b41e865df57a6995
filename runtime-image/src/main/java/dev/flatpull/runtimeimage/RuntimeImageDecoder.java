package dev.flatpull.runtimeimage;

import com.github.luben.zstd.Zstd;
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
 * in memory and for a stream alike.
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
    for (int f = 0; f < index.frames().size(); f++) {
      if (byFrame.get(f).isEmpty()) {
        continue;
      }
      Frame frame = index.frames().get(f);
      long start = layout.frameStart(f);
      byte[] compressed = start + frame.length() > blob.length ? null
          : Arrays.copyOfRange(blob, (int) start, (int) start + frame.length());
      long[] done = decodeFrame(layout, f, compressed, binding, byFrame.get(f), sink, rejected,
          "is missing from the blob (" + blob.length + " bytes)");
      accepted += done[0];
      bytes += done[1];
    }
    return new Result(accepted, bytes, rejected);
  }

  /**
   * Decodes frame {@code f} from its compressed bytes ({@code null} when they did not arrive, then its extents are
   * rejected as missing, {@code why} saying why), verifies each extent of it and passes the verified ones to
   * {@code sink}; rejections are added to {@code rejected}.
   *
   * @return extents and bytes passed on
   */
  public static long[] decodeFrame(Layout layout, int f, byte[] compressed, ImageBinding binding, List<int[]> extents,
      Sink sink, List<Rejection> rejected, String why) throws IOException {
    RuntimeImageIndex index = layout.index();
    Frame frame = index.frames().get(f);
    long start = layout.frameStart(f);
    byte[] content = null;
    String failure = null;
    RejectionKind kind = RejectionKind.BAD_FRAME;
    if (compressed == null) {
      kind = RejectionKind.MISSING_FRAME;
      failure = "frame " + f + " (bytes " + start + ".." + (start + frame.length()) + ") " + why;
    } else {
      try {
        content = Zstd.decompress(compressed, frame.size());
        if (content.length != frame.size()) {
          failure = "frame " + f + " decompressed to " + content.length + " bytes, the index says " + frame.size();
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
      String where = "layer " + layer.digest().shortHex() + " " + layer.files().get(e.file()) + " ["
          + e.fileOffset() + ", " + e.fileEnd() + ")";
      if (failure != null) {
        rejected.add(new Rejection(kind, where, failure));
        continue;
      }
      byte[] slice = Arrays.copyOfRange(content, e.frameOffset(), e.frameOffset() + e.length());
      Digest expected = binding.expected(le[0], le[1]);
      VerifiedContent verified;
      try {
        verified = VerifiedContent.check(expected, where, slice);
      } catch (DigestMismatchException m) {
        rejected.add(new Rejection(RejectionKind.BAD_EXTENT, where, m.getMessage()));
        continue;
      }
      sink.accept(le[0], le[1], verified);
      accepted++;
      bytes += slice.length;
    }
    return new long[] {accepted, bytes};
  }
}
