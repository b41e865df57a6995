package dev.flatpull.fetcher.layer;

import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.NamedFiles;
import dev.flatpull.fetcher.oci.Descriptor;
import java.io.IOException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Logger;

/**
 * Lazily read layers' indexes, opened from the node's kept index files ({@link LayerIndexFile}) when there is a sound
 * one, and otherwise from the layer's TOC, verified, after which the file is written for the next open. A file that
 * is refused (truncated, corrupt, of another version or layer) is removed, said in one log line, and rebuilt. One
 * instance per node's files: a layer forgotten while its file waits to be written is not written. Thread-safe.
 */
public final class KeptIndexes {
  private static final Logger LOG = Logger.getLogger(KeptIndexes.class.getName());
  /** Every write at once, on the opening thread. */
  public static final Writes AT_ONCE = (bytes, write) -> write.run();

  /** Where and when a new index file is written. */
  @FunctionalInterface
  public interface Writes {
    /**
     * Runs {@code write} now or later, on any thread, once or more than once (the file is written once).
     *
     * @param bytes about the file's size: a small file may be written at once, a large one takes disk and CPU a start
     *     may need
     */
    void schedule(long bytes, Runnable write);
  }

  private final NamedFiles files;
  private final Writes writer;
  // Files waiting to be written; a forget takes its name out, and the write then does not happen.
  private final Set<String> pending = ConcurrentHashMap.newKeySet();

  /** @param writer writes a new index file, off the opening thread (a start does not wait for it) */
  public KeptIndexes(NamedFiles files, Writes writer) {
    this.files = files;
    this.writer = writer;
  }

  /** The verified index of the eStargz or zstd:chunked layer {@code layer}, whose blob {@code remote} reads. */
  public LayerIndex open(Descriptor layer, BlobReader remote, FetchLimits limits) throws IOException {
    LayerFormat format = LayerFormat.of(layer);
    LayerIndexFile.Key key = LayerIndexFile.Key.of(format, layer);
    Optional<Path> kept = files.find(key.fileName());
    if (kept.isPresent()) {
      try {
        return LayerIndexFile.read(key, kept.get());
      } catch (NoSuchFileException evicted) {
        // Evicted between finding and opening it: the TOC follows, as at a first open.
      } catch (LayerFormatException e) {
        LOG.warning(e.getMessage() + "; layer " + layer.digest() + " is opened from its TOC and the file rebuilt");
        files.remove(key.fileName());
      }
    }
    LayerIndex index = format.readToc(layer, remote, limits);
    if (files != NamedFiles.NONE && pending.add(key.fileName())) {
      writer.schedule(LayerIndexFile.approximateLength(index), () -> {
        if (!pending.remove(key.fileName())) {
          return; // forgotten meanwhile: the layer left the node
        }
        try {
          files.keep(key.fileName(), ch -> LayerIndexFile.write(key, index, ch));
        } catch (IOException | RuntimeException e) {
          // The layer is served from memory all the same; only its next open reads the TOC again.
          LOG.warning("keeping the index of layer " + layer.digest() + " failed: " + e);
        }
      });
    }
    return index;
  }

  /** Removes the kept index of {@code layer} (the layer is gone from the node), or its write still to come. */
  public void forget(Descriptor layer) throws IOException {
    LayerFormat format = LayerFormat.of(layer);
    if (format != LayerFormat.PLAIN) {
      String name = LayerIndexFile.Key.of(format, layer).fileName();
      pending.remove(name);
      files.remove(name);
    }
  }
}
