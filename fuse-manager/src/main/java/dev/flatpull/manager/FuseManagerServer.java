package dev.flatpull.manager;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.endpoints.grpc.UnixSockets;
import io.grpc.Server;
import java.io.IOException;

/**
 * The FUSE manager process's service: a {@link LayerServer} answering the daemon on its unix socket. The process's
 * composition root ({@code flatpull fuse-manager}) opens the layer server, warms it up and binds its meters first.
 */
public final class FuseManagerServer implements AutoCloseable {
  private final LayerServer layers;
  private final Server server;

  private FuseManagerServer(LayerServer layers, Server server) {
    this.layers = layers;
    this.server = server;
  }

  /**
   * Serves {@code layers} on {@code [snapshotter] fuse_manager_socket}; from then on the server owns them (closing it
   * unmounts every layer). On failure {@code layers} stay the caller's.
   */
  public static FuseManagerServer serve(FlatpullConfig config, LayerServer layers, String version) throws IOException {
    return new FuseManagerServer(layers,
        UnixSockets.serve(config.snapshotter().fuseManagerSocket(), new FuseManagerService(layers, config.root(), version)));
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
