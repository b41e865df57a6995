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
   *
   * @param inPlaceOf whether another manager still listens there, to be retired: the socket is then bound aside and
   *     renamed over its one, so that the daemon finds a manager at every moment
   */
  public static FuseManagerServer serve(FlatpullConfig config, LayerServer layers, String version, boolean inPlaceOf)
      throws IOException {
    FuseManagerService service = new FuseManagerService(layers, config.root(), version, FuseManagerServer::exitRetired);
    java.nio.file.Path socket = config.snapshotter().fuseManagerSocket();
    return new FuseManagerServer(layers, inPlaceOf ? UnixSockets.serveInPlaceOf(socket, service)
        : UnixSockets.serve(socket, service));
  }

  /**
   * A retired manager's end: no unmount, no shutdown hook (which would unmount), and its socket left alone (closing
   * the server would delete the path, which is its successor's now).
   */
  private static void exitRetired() {
    try {
      // The answer to Retire is on its way out.
      Thread.sleep(100);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    System.err.println("flatpull fuse-manager " + ProcessHandle.current().pid() + ": retired; its mounts are served by"
        + " its successor");
    Runtime.getRuntime().halt(0);
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
