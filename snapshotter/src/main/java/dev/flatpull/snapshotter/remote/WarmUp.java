package dev.flatpull.snapshotter.remote;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.fetcher.convert.ConvertedLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.layer.ZstdChunkedToc;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.List;
import java.util.Optional;

/**
 * Runs a remote layer's whole cold path once on a synthetic layer, so that a node's first remote Prepare is as fast as
 * its later ones: on a fresh JVM, opening the Debian + python3 layer's TOC took about 650 ms (the transfer is under
 * 100 ms at 200 Mbit/s; the rest was gunzip, hashing and JSON parsing not yet compiled), and the first mount paid
 * about 180 ms for binding libfuse. Here a layer of a few thousand files is written in both lazy formats, each TOC
 * verified and parsed, the tree built, mounted, and a file read through the page cache (a throwaway one, so nothing
 * synthetic reaches the host's cache). Everything lives under {@code dir} and is deleted afterwards.
 */
public final class WarmUp {
  private static final int FILES = 4000;

  private WarmUp() {}

  public static void run(Path dir) throws IOException {
    Files.createDirectories(dir);
    try {
      Path tar = dir.resolve("warm-up.tar");
      try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(tar))) {
        for (int i = 0; i < FILES; i++) {
          byte[] content = ("warm-up " + i + "\n").repeat(1 + i % 7).getBytes();
          TarWriter.writeHeader(out, TarHeader.regular("usr/lib/warm/" + (i % 40) + "/f" + i, content.length, 0644,
              Instant.EPOCH));
          out.write(content);
          TarWriter.pad(out, content.length);
        }
        TarWriter.writeEnd(out);
      }
      LazyLayer last = null;
      for (LayerFormat format : List.of(LayerFormat.ESTARGZ, LayerFormat.ZSTD_CHUNKED)) {
        ConvertedLayer c = new LazyLayerWriter(format, LazyLayerWriter.DEFAULT_CHUNK_SIZE, 1)
            .write(tar, dir.resolve("warm-up-" + format), List.of());
        byte[] blob = Files.readAllBytes(c.blob());
        Descriptor d = new Descriptor(format == LayerFormat.ESTARGZ ? MediaTypes.OCI_LAYER_GZIP
            : MediaTypes.OCI_LAYER_ZSTD, c.digest(), c.size(), c.annotations());
        BlobReader reader = range -> java.util.Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
        for (int round = 0; round < 3; round++) {
          LayerIndex index = format == LayerFormat.ESTARGZ ? EstargzToc.read(d, reader, FetchLimits.DEFAULTS)
              : ZstdChunkedToc.read(d, reader, FetchLimits.DEFAULTS);
          LayerTree.of(index);
          last = new LazyLayer(index, reader, 64 << 10);
        }
      }
      try (PageCache cache = PageCache.open(dir.resolve("cache"),
          new CacheSettings(Optional.empty(), 8L << 20, 64L << 20, CacheSettings.DEFAULTS.reservationWait()));
          LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(last.index()),
              new LayerContentReader(last, cache), FuseEvents.NONE), dir.resolve("mount"))) {
        Files.readAllBytes(m.mountPoint().resolve("usr/lib/warm/7/f7"));
      }
    } finally {
      deleteTree(dir);
    }
  }

  private static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (var walk = Files.walk(dir)) {
      for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }
}
