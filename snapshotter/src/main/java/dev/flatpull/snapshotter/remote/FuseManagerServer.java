package dev.flatpull.snapshotter.remote;

import dev.flatpull.config.ConfigException;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.snapshotter.grpc.UnixSockets;
import io.grpc.Server;
import java.io.IOException;

/** The FUSE manager process: a {@link LayerServer} answering the daemon on its unix socket. */
public final class FuseManagerServer implements AutoCloseable {
  private final LayerServer layers;
  private final Server server;

  private FuseManagerServer(LayerServer layers, Server server) {
    this.layers = layers;
    this.server = server;
  }

  public static FuseManagerServer start(FlatpullConfig config, String version) throws IOException, ConfigException {
    LayerServer layers = new LayerServer(config);
    try {
      return new FuseManagerServer(layers,
          UnixSockets.serve(config.snapshotter().fuseManagerSocket(), new FuseManagerService(layers, version)));
    } catch (IOException | RuntimeException e) {
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
    layers.close();
  }
}
