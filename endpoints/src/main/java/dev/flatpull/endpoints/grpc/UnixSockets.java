package dev.flatpull.endpoints.grpc;

import io.grpc.BindableService;
import io.grpc.ManagedChannel;
import io.grpc.Server;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.channel.EventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollDomainSocketChannel;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollServerDomainSocketChannel;
import io.grpc.netty.shaded.io.netty.channel.unix.DomainSocketAddress;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.concurrent.TimeUnit;

/** gRPC over unix domain sockets (containerd's proxy plugins and the FUSE manager speak nothing else). */
public final class UnixSockets {
  // One event loop for every client channel of the process: channels are cheap, threads are not.
  private static final EventLoopGroup CLIENT_LOOP = new EpollEventLoopGroup(1,
      dev.flatpull.core.DaemonThreads.named("flatpull-grpc-client"));

  private UnixSockets() {}

  /**
   * Serves {@code services} on {@code socket}, readable and writable by root only. A stale socket file (left by a
   * killed process) is removed first: binding would fail on it.
   */
  public static Server serve(Path socket, BindableService... services) throws IOException {
    Files.createDirectories(socket.toAbsolutePath().getParent());
    Files.deleteIfExists(socket);
    return bind(socket, services);
  }

  /**
   * Serves {@code services} on {@code socket} where another server may still listen: bound beside it, then renamed
   * over it, so that a client connecting at any moment finds one of the two (the other keeps the connections it has).
   * The server's own path is the one it was bound at: closing it leaves {@code socket} in place (a stale socket file,
   * which {@link #serve} replaces).
   */
  public static Server serveInPlaceOf(Path socket, BindableService... services) throws IOException {
    Files.createDirectories(socket.toAbsolutePath().getParent());
    Path aside = socket.resolveSibling(socket.getFileName() + "." + ProcessHandle.current().pid());
    Files.deleteIfExists(aside);
    Server server = bind(aside, services);
    try {
      Files.move(aside, socket, java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    } catch (IOException | RuntimeException e) {
      server.shutdownNow();
      Files.deleteIfExists(aside);
      throw e;
    }
    return server;
  }

  private static Server bind(Path socket, BindableService... services) throws IOException {
    EventLoopGroup boss = new EpollEventLoopGroup(1);
    EventLoopGroup workers = new EpollEventLoopGroup(2);
    NettyServerBuilder b = NettyServerBuilder.forAddress(new DomainSocketAddress(socket.toString()))
        .channelType(EpollServerDomainSocketChannel.class)
        .bossEventLoopGroup(boss)
        .workerEventLoopGroup(workers)
        // Requests block on disk and on the registry: run them off the event loop, on a growing pool.
        .executor(java.util.concurrent.Executors.newCachedThreadPool(
            dev.flatpull.core.DaemonThreads.named("flatpull-grpc")));
    for (BindableService s : services) {
      b.addService(s);
    }
    Server server = b.build().start();
    Files.setPosixFilePermissions(socket, PosixFilePermissions.fromString("rw-------"));
    return server;
  }

  /** A channel to the gRPC server on {@code socket}. */
  public static ManagedChannel connect(Path socket) {
    return NettyChannelBuilder.forAddress(new DomainSocketAddress(socket.toString()))
        .channelType(EpollDomainSocketChannel.class)
        .eventLoopGroup(CLIENT_LOOP)
        .usePlaintext()
        .build();
  }

  /** Stops {@code server}, letting calls in flight finish for a few seconds. */
  public static void stop(Server server) {
    server.shutdown();
    try {
      if (!server.awaitTermination(5, TimeUnit.SECONDS)) {
        server.shutdownNow();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      server.shutdownNow();
    }
  }
}
