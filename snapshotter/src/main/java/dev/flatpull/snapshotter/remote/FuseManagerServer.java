package dev.flatpull.snapshotter.remote;

import dev.flatpull.config.ConfigException;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.snapshotter.grpc.UnixSockets;
import io.grpc.Server;
import dev.flatpull.snapshotter.metrics.ManagerMeters;
import dev.flatpull.snapshotter.metrics.Meters;
import dev.flatpull.snapshotter.metrics.MetricsServer;
import java.io.IOException;

/** The FUSE manager process: a {@link LayerServer} answering the daemon on its unix socket. */
public final class FuseManagerServer implements AutoCloseable {
  private final LayerServer layers;
  private final Server server;
  private final java.util.Optional<MetricsServer> metrics;

  private FuseManagerServer(LayerServer layers, Server server, java.util.Optional<MetricsServer> metrics) {
    this.layers = layers;
    this.server = server;
    this.metrics = metrics;
  }

  public static FuseManagerServer start(FlatpullConfig config, String version) throws IOException, ConfigException {
    Meters meters = new Meters();
    ManagerMeters managerMeters = new ManagerMeters(meters);
    LayerServer layers = LayerServer.open(config, managerMeters);
    java.util.Optional<MetricsServer> endpoint = java.util.Optional.empty();
    try {
      if (config.snapshotter().warmUp()) {
        layers.warmUp(version);
      }
      managerMeters.bind(layers);
      if (config.snapshotter().fuseManagerMetricsAddress().isPresent()) {
        endpoint = java.util.Optional.of(
            MetricsServer.start(config.snapshotter().fuseManagerMetricsAddress().get(), meters));
      }
      return new FuseManagerServer(layers,
          UnixSockets.serve(config.snapshotter().fuseManagerSocket(), new FuseManagerService(layers, version)),
          endpoint);
    } catch (IOException | RuntimeException e) {
      endpoint.ifPresent(MetricsServer::close);
      layers.close();
      throw e;
    }
  }

  public void awaitTermination() throws InterruptedException {
    server.awaitTermination();
  }

  /** Stops answering and unmounts every layer. */
  @Override
  public void close() throws IOException {
    UnixSockets.stop(server);
    metrics.ifPresent(MetricsServer::close);
    layers.close();
  }
}
