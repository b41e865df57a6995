package dev.flatpull.it.bench;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RegistryCredentials;
import dev.flatpull.fetcher.convert.ImageConverter;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.registry.Sleeper;
import dev.flatpull.it.Processes;
import dev.flatpull.it.RegistryServer;
import dev.flatpull.it.TestImage;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.InstantSource;
import java.util.List;

/**
 * What the benchmarks read from: the {@link TestImage} pushed to a real local registry, converted to a lazy format
 * (1 MiB chunks), and its lower layer opened lazily. Closing stops the registry and deletes the work directory.
 */
final class SampleLazyLayer implements AutoCloseable {
  final RegistryServer registry;
  final RegistryClients clients;
  final RegistryClient client;
  final Descriptor blob;
  final LazyLayer layer;
  final Path work;

  SampleLazyLayer(LayerFormat format) throws Exception {
    registry = RegistryServer.start();
    TestImage image = TestImage.push(registry, "bench/sample", "plain");
    FlatpullConfig config = FlatpullConfig.DEFAULTS.withRegistry(FlatpullConfig.DEFAULTS.registry().withPlainHttp(true));
    clients = new RegistryClients(config, RegistryCredentials.NONE, FetchListener.NONE, Sleeper.SYSTEM,
        InstantSource.system());
    ImageReference src = image.reference;
    ImageReference dst = src.withTag("lazy");
    work = Files.createTempDirectory("flatpull-bench");
    client = clients.client(dst);
    ImageConverter.Result r = new ImageConverter(config.limits(), work, line -> {}).convert(clients.client(src), src,
        client, dst, new ImageConverter.Options(format, 1 << 20, List.of(), format == LayerFormat.ESTARGZ ? 6 : 3,
            Platform.current()));
    blob = r.layers().get(0);
    layer = new LayerOpener(client, config, work).open(blob);
  }

  @Override
  public void close() throws Exception {
    clients.close();
    registry.close();
    Processes.deleteTree(work);
  }
}
