package dev.flatpull.runtimeimage;

import com.github.luben.zstd.Zstd;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Frame;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

/**
 * Runtime images that ask more of a node than their image allows, made from a valid one: what the limits
 * (docs/runtime-images.md, "Limits") refuse or ignore. Shared with the integration tests, which start containers from
 * them.
 */
public final class HostileRuntimeImages {
  private HostileRuntimeImages() {}

  /** A runtime image, as pushed: its index (for the artifact's annotations) and its blob. */
  public record Hostile(RuntimeImageIndex index, byte[] blob) {}

  /** {@code valid}'s header over an index of a few kilobytes of zstd announcing {@code announced} bytes of zeros. */
  public static Hostile zstdBomb(Hostile valid, int announced) {
    byte[] bomb = Zstd.compress(new byte[announced], 19);
    byte[] blob = new byte[RuntimeImageFormat.HEADER_SIZE + bomb.length];
    System.arraycopy(valid.blob(), 0, blob, 0, 20);
    ByteBuffer.wrap(blob, 20, 4).order(ByteOrder.LITTLE_ENDIAN).putInt(bomb.length);
    System.arraycopy(bomb, 0, blob, RuntimeImageFormat.HEADER_SIZE, bomb.length);
    return new Hostile(valid.index(), blob);
  }

  /**
   * {@code valid} with {@code count} file names in its first layer that no extent uses: well-formed, consistent with
   * itself, and large.
   */
  public static Hostile withUnusedFiles(Hostile valid, int count) throws RuntimeImageFormatException {
    RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(valid.blob());
    RuntimeImageIndex i = layout.index();
    List<LayerExtents> layers = new ArrayList<>(i.layers());
    LayerExtents l = layers.get(0);
    List<String> files = new ArrayList<>(l.files());
    for (int k = 0; k < count; k++) {
      files.add("/unused/" + "u".repeat(64) + k);
    }
    layers.set(0, new LayerExtents(l.digest(), files, l.extents()));
    RuntimeImageIndex padded = new RuntimeImageIndex(i.verify(), i.service(), i.flatpullVersion(), i.createdAt(),
        i.trace(), i.frames(), layers);
    return new Hostile(padded, RuntimeImageFormat.write(padded, layout.frames(valid.blob())));
  }

  /** {@code valid}'s blob with {@code extra} random bytes after its last frame. */
  public static Hostile longer(Hostile valid, int extra) {
    byte[] noise = new byte[extra];
    new Random(5).nextBytes(noise);
    byte[] blob = Arrays.copyOf(valid.blob(), valid.blob().length + extra);
    System.arraycopy(noise, 0, blob, valid.blob().length, extra);
    return new Hostile(valid.index(), blob);
  }

  /** {@code valid} with a frame of {@code size} random bytes after frame 0 that no extent names. */
  public static Hostile withFrameWithoutExtents(Hostile valid, int size) throws RuntimeImageFormatException {
    RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(valid.blob());
    RuntimeImageIndex i = layout.index();
    byte[] noise = new byte[size];
    new Random(9).nextBytes(noise);
    List<byte[]> stored = new ArrayList<>(layout.frames(valid.blob()));
    stored.add(1, Zstd.compress(noise, 1));
    List<Frame> frames = new ArrayList<>();
    long offset = 0;
    for (int f = 0; f < stored.size(); f++) {
      Frame old = f == 1 ? null : i.frames().get(f == 0 ? 0 : f - 1);
      frames.add(new Frame(old == null ? 0 : old.layer(), offset, stored.get(f).length, old == null ? size
          : old.size()));
      offset += stored.get(f).length;
    }
    List<LayerExtents> layers = i.layers().stream().map(l -> new LayerExtents(l.digest(), l.files(),
        l.extents().stream().map(e -> new Extent(e.file(), e.fileOffset(), e.length(), e.frame() == 0 ? 0
            : e.frame() + 1, e.frameOffset(), e.digest())).toList())).toList();
    RuntimeImageIndex noisy = new RuntimeImageIndex(i.verify(), i.service(), i.flatpullVersion(), i.createdAt(),
        i.trace(), frames, layers);
    return new Hostile(noisy, RuntimeImageFormat.write(noisy, stored));
  }

  /** {@code valid} with frame 0 holding {@code padding} zero bytes more than its extents. */
  public static Hostile withFrameLargerThanItsExtents(Hostile valid, int padding) throws RuntimeImageFormatException {
    RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(valid.blob());
    RuntimeImageIndex i = layout.index();
    List<byte[]> stored = new ArrayList<>(layout.frames(valid.blob()));
    byte[] content = Zstd.decompress(stored.get(0), i.frames().get(0).size());
    byte[] padded = Arrays.copyOf(content, content.length + padding);
    stored.set(0, Zstd.compress(padded, 3));
    List<Frame> frames = new ArrayList<>();
    long offset = 0;
    for (int f = 0; f < stored.size(); f++) {
      Frame old = i.frames().get(f);
      frames.add(new Frame(old.layer(), offset, stored.get(f).length, f == 0 ? padded.length : old.size()));
      offset += stored.get(f).length;
    }
    RuntimeImageIndex bigger = new RuntimeImageIndex(i.verify(), i.service(), i.flatpullVersion(), i.createdAt(),
        i.trace(), frames, i.layers());
    return new Hostile(bigger, RuntimeImageFormat.write(bigger, stored));
  }
}
