package dev.flatpull.manager;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.layer.TarSplit;
import dev.flatpull.fetcher.oci.ImageConfig;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.pagecache.PageCache;
import java.io.IOException;
import java.util.Optional;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Once a layer's content is all in the page cache (its background fetch ended), checks that the layer is the tar
 * stream its image config names: the digest of the stream rebuilt from the verified tar-split and the cached files must
 * be the config's diff_id. Lazy reads trust the TOC the manifest binds; this is as far as trust goes without the
 * layer's compressed bytes. A mismatch means an ordinary pull of the image (containerd, podman) refuses the layer, so it
 * is said loudly: a log line and a metric. Layers without a tar-split cannot be rebuilt; {@code flatpull inspect
 * --verify} downloads them whole.
 */
final class DiffIdCheck implements Runnable {
  private static final Logger LOG = Logger.getLogger(DiffIdCheck.class.getName());

  private final LayerIndex index;
  private final Optional<ImageManifest> manifest;
  private final PageCache cache;
  private final BlobSource configs;
  private final RemoteLayerMetrics metrics;

  /** Fetches a small verified blob (the image config). */
  @FunctionalInterface
  interface BlobSource {
    byte[] fetch(Descriptor blob) throws IOException;
  }

  DiffIdCheck(LayerIndex index, Optional<ImageManifest> manifest, PageCache cache, BlobSource configs,
      RemoteLayerMetrics metrics) {
    this.index = index;
    this.manifest = manifest;
    this.cache = cache;
    this.configs = configs;
    this.metrics = metrics;
  }

  @Override
  public void run() {
    String layer = "layer " + index.blob();
    try {
      if (!index.tarSplitChecked() || manifest.isEmpty()) {
        metrics.diffIdChecked("unverifiable");
        LOG.fine(() -> layer + " is local; its diff_id is not checked: "
            + (manifest.isEmpty() ? "its image manifest is not known" : "it has no tar-split to rebuild its tar stream from"));
        return;
      }
      ImageManifest m = manifest.get();
      Optional<Digest> expected = ImageConfig.parse(configs.fetch(m.config()), m.config().digest())
          .diffIdOf(m, index.blob());
      if (expected.isEmpty()) {
        metrics.diffIdChecked("unverifiable");
        LOG.warning(layer + " is local, but the config of image " + m.digest() + " gives it no diff_id");
        return;
      }
      Optional<Digest> actual = index.rebuiltDiffId(this::cached);
      if (actual.isEmpty()) {
        metrics.diffIdChecked("unverifiable");
        return;
      }
      if (actual.get().equals(expected.get())) {
        metrics.diffIdChecked("match");
        LOG.info(layer + " is local and is the tar stream its image config names (diff_id " + expected.get() + ")");
      } else {
        metrics.diffIdChecked("mismatch");
        LOG.severe("DIFF_ID MISMATCH: " + layer + " of image " + m.digest() + " holds a tar stream of digest "
            + actual.get() + ", but the image config gives diff_id " + expected.get() + ": containerd and podman refuse"
            + " this layer when they pull the image whole; the files flatpull serves are the ones its TOC and tar-split"
            + " describe, verified chunk by chunk");
      }
    } catch (IOException | RuntimeException e) {
      metrics.diffIdChecked("failed");
      LOG.log(Level.WARNING, "the diff_id check of " + layer + " failed: " + e.getMessage(), e);
    }
  }

  /** A file's content from the page cache only: the check must not fetch anything again. */
  private int cached(LayerEntry file, long offset, byte[] dst, int length) throws IOException {
    int n = 0;
    for (LayerChunk c : LazyLayer.covering(file, offset, length)) {
      byte[] content;
      if (c.stored().isEmpty()) {
        content = new byte[(int) c.size()];
      } else {
        content = cache.peek(c.digest()).orElseThrow(() -> new IOException(
            "chunk " + c.digest() + " of '" + file.name() + "' left the page cache before the check read it"));
      }
      long from = Math.max(offset + n, c.fileOffset());
      int take = (int) Math.min(c.fileEnd() - from, length - n);
      System.arraycopy(content, (int) (from - c.fileOffset()), dst, n, take);
      n += take;
      if (n == length) {
        break;
      }
    }
    return n;
  }
}
