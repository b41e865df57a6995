package dev.flatpull.it;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.FuseSettings;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.fuse.BackingFiles;
import dev.flatpull.fuse.DeviceHandover;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.fuse.ReadActivity;
import dev.flatpull.pagecache.PageCache;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;

/**
 * A process that serves one layer's FUSE mount for {@link TakeoverIT}, as a FUSE manager would: {@code mount} mounts
 * it with the kernel engine and hands its connection to the holder listening at the socket; {@code resume} asks the
 * holder for the connection and serves the mount another process made. Reads fetch from a blob whose every range
 * read waits {@code delayMillis}, like a slow registry, so that a kill finds requests in flight.
 *
 * <pre>TakeoverServer mount|resume MOUNT_POINT SOCKET DELAY_MILLIS SCRATCH</pre>
 */
public final class TakeoverServer {
  static final int FILES = 4;
  static final int FILE_BYTES = 2 << 20;

  private TakeoverServer() {}

  /** The layer's files, the same in every process. */
  static byte[][] files() {
    Random random = new Random(36);
    byte[][] files = new byte[FILES][];
    for (int i = 0; i < FILES; i++) {
      files[i] = new byte[FILE_BYTES + i];
      random.nextBytes(files[i]);
    }
    return files;
  }

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    Path mountPoint = Path.of(args[1]);
    Path socket = Path.of(args[2]);
    long delay = Long.parseLong(args[3]);
    Path scratch = Files.createTempDirectory(Path.of(args[4]), "server");
    InMemoryLayer layer = InMemoryLayer.estargz(LayerTar.numbered(files()), scratch);
    byte[] blob = layer.blob();
    BlobReader slow = range -> {
      try {
        Thread.sleep(delay);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      return Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
    };
    LazyLayer lazy = new LazyLayer(EstargzToc.read(layer.descriptor(), layer.reader(), FetchLimits.DEFAULTS), slow,
        0);
    PageCache cache = PageCache.open(scratch.resolve("cache"), CacheSettings.DEFAULTS);
    LayerFileSystem fs = new LayerFileSystem(LayerTree.of(lazy.index()),
        new LayerContentReader(lazy, cache, 0, new ReadActivity()), FuseEvents.NONE);
    DeviceHandover holder = DeviceHandover.connect(socket);
    if (mode.equals("mount")) {
      LayerMount m = LayerMount.mount(fs, mountPoint, FuseSettings.Engine.KERNEL, BackingFiles.NONE, 0);
      LayerMount.Connection c = m.connection().orElseThrow();
      holder.send(c.device(), c.negotiation());
      System.out.println("serving " + mountPoint);
    } else {
      holder.send(-1, "resume".getBytes(StandardCharsets.UTF_8));
      DeviceHandover.Received r = holder.receive();
      LayerMount.resume(fs, mountPoint, r.descriptor(), r.message(), BackingFiles.NONE);
      System.out.println("resumed " + mountPoint);
    }
    System.out.flush();
    Thread.sleep(Long.MAX_VALUE);
  }
}
