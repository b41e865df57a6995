package dev.flatpull.fetcher.layer;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.NamedFiles;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.registry.RegistryClient;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Opens a layer of an image for reading in the best way its descriptor allows: lazily through its verified TOC
 * (eStargz, zstd:chunked), or by fetching it whole into {@code workDir} and indexing it locally (plain layers, and
 * lazy-format layers whose TOC annotation was lost).
 */
public final class LayerOpener {
  private static final java.util.logging.Logger LOG = java.util.logging.Logger.getLogger(LayerOpener.class.getName());
  private final RegistryClient client;
  private final FlatpullConfig config;
  private final Path workDir;
  private final java.util.concurrent.Executor decoder;
  private final java.util.concurrent.Executor transfers;
  private final KeptIndexes indexes;

  /** Chunks are decoded on the reading thread. */
  public LayerOpener(RegistryClient client, FlatpullConfig config, Path workDir) {
    this(client, config, workDir, Runnable::run);
  }

  /** @param decoder decompresses and verifies the chunks of one request (see {@link LazyLayer}) */
  public LayerOpener(RegistryClient client, FlatpullConfig config, Path workDir, java.util.concurrent.Executor decoder) {
    this(client, config, workDir, decoder, Runnable::run);
  }

  /**
   * @param decoder decompresses and verifies the chunks of one request
   * @param transfers sends the requests a read starts and reads them as they arrive (see {@link LazyLayer#fetchAsync})
   */
  public LayerOpener(RegistryClient client, FlatpullConfig config, Path workDir, java.util.concurrent.Executor decoder,
      java.util.concurrent.Executor transfers) {
    this(client, config, workDir, decoder, transfers, new KeptIndexes(NamedFiles.NONE, KeptIndexes.AT_ONCE));
  }

  private LayerOpener(RegistryClient client, FlatpullConfig config, Path workDir, java.util.concurrent.Executor decoder,
      java.util.concurrent.Executor transfers, KeptIndexes indexes) {
    this.client = client;
    this.config = config;
    this.workDir = workDir;
    this.decoder = decoder;
    this.transfers = transfers;
    this.indexes = indexes;
  }

  /**
   * The same opener, keeping each lazily read layer's index through {@code indexes} ({@link LayerIndexFile}), so that
   * later opens of the layer neither fetch nor parse its TOC.
   */
  public LayerOpener keepingIndexes(KeptIndexes indexes) {
    return new LayerOpener(client, config, workDir, decoder, transfers, indexes);
  }

  public LazyLayer open(Descriptor layer) throws IOException {
    BlobReader remote = BlobReader.of(client, layer.digest());
    long gap = config.registry().coalesceGapBytes();
    return switch (LayerFormat.of(layer)) {
      case ESTARGZ, ZSTD_CHUNKED -> new LazyLayer(trusted(indexes.open(layer, remote, config.limits())), remote, gap, decoder, transfers);
      case PLAIN -> {
        Files.createDirectories(workDir);
        Path blob = workDir.resolve(layer.digest().hex() + ".blob");
        if (!Files.exists(blob)) {
          client.downloadBlob(layer, blob);
        }
        yield PlainLayerIndexer.open(layer, blob, workDir.resolve(layer.digest().hex() + ".tar"), config.limits());
      }
    };
  }

  /**
   * A lazily read layer's index, if the trust the configuration asks for is met: with {@code require_tar_split}, only
   * a TOC checked against a verified tar-split. A zstd:chunked layer without one is served with a warning that names
   * it (eStargz never has one, so its layers go without).
   */
  private LayerIndex trusted(LayerIndex index) throws LayerFormatException {
    if (index.tarSplitChecked()) {
      return index;
    }
    String name = index.format() == LayerFormat.ESTARGZ ? "eStargz" : "zstd:chunked";
    if (config.snapshotter().requireTarSplit()) {
      throw new LayerFormatException(name + " layer " + index.blob() + " has no tar-split to check its TOC against,"
          + " and [snapshotter] require_tar_split refuses to serve such a layer lazily");
    }
    if (index.format() == LayerFormat.ZSTD_CHUNKED) {
      LOG.warning("zstd:chunked layer " + index.blob() + " has no verifiable tar-split (written by containers/storage"
          + " before 1.47, as Debian 12's podman, buildah and skopeo do): its files' metadata is served on the word of"
          + " the TOC the manifest binds, unchecked against what an ordinary pull would unpack");
    }
    return index;
  }
}
