package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.MergedLayers;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchStatistics;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClient.ResolvedImage;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.RequestKind;
import java.io.BufferedOutputStream;
import java.io.FileNotFoundException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code flatpull cat REF PATH}: one file's bytes, fetched lazily and verified, to stdout. */
@Command(name = "cat", mixinStandardHelpOptions = true,
    description = {"Write one file of an image to stdout, fetching only the chunks that hold it.",
        "Layers are searched top-down as overlayfs would (whiteouts, opaque directories, symlinks)."})
final class CatCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Parameters(index = "0", paramLabel = "REF", description = "Image reference.")
  String reference;

  @Parameters(index = "1", paramLabel = "PATH", description = "Path of the file in the image, e.g. /etc/os-release.")
  String path;

  @Option(names = "--stats", description = "Print the registry requests and bytes it took to stderr.")
  boolean stats;

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    ImageReference ref = ImageReference.parse(reference);
    FetchStatistics statistics = new FetchStatistics();
    Path work = Files.createTempDirectory("flatpull-cat");
    long written;
    try (RegistryClients clients = global.clients(config, statistics)) {
      RegistryClient client = clients.client(ref);
      ResolvedImage image = client.resolve(ref, global.platform());
      List<Descriptor> layers = image.manifest().layers();
      LayerOpener opener = new LayerOpener(client, config, work);
      MergedLayers merged = new MergedLayers(layers.size(), i -> opener.open(layers.get(i)));
      MergedLayers.Found found = merged.resolve(path);
      if (found.layer().index().contentOf(found.entry()).type() != EntryType.REG) {
        throw new FileNotFoundException("'" + path + "' is a " + found.entry().type().tocName() + ", not a regular file");
      }
      OutputStream out = new BufferedOutputStream(System.out, 1 << 16);
      found.layer().copyTo(found.entry(), out);
      out.flush();
      written = found.layer().index().contentOf(found.entry()).size();
      if (stats) {
        long layerBytes = layers.stream().mapToLong(Descriptor::size).sum();
        System.err.printf(java.util.Locale.ROOT,
            "file: %d bytes from layer %s (%s)%nrequests: %d (manifest %d, token %d, blob %d, range %d)%n"
                + "received: %d bytes (range reads %d bytes); image layers total %d bytes; %.4f of the layers%n",
            written, found.layer().index().blob().shortHex(), InspectCommand.formatName(found.layer().index().format()),
            statistics.totalRequests(), statistics.requests(RequestKind.MANIFEST), statistics.requests(RequestKind.TOKEN),
            statistics.requests(RequestKind.BLOB), statistics.requests(RequestKind.BLOB_RANGE),
            statistics.totalBytes(), statistics.bytes(RequestKind.BLOB_RANGE), layerBytes,
            layerBytes == 0 ? 0.0 : (double) statistics.totalBytes() / layerBytes);
        if (statistics.rangesGivenUp() + statistics.rangesReadThrough() > 0) {
          System.err.printf(java.util.Locale.ROOT,
              "ranges answered with the whole blob: %d given up for the next endpoint, %d read through%n",
              statistics.rangesGivenUp(), statistics.rangesReadThrough());
        }
      }
    } finally {
      deleteTree(work);
    }
    return 0;
  }

  static void deleteTree(Path dir) throws java.io.IOException {
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
