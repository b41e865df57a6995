package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.ConfigException;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClients;
import java.nio.file.Files;
import java.nio.file.Path;
import picocli.CommandLine.Option;

/** Options every command takes, and what they build: the configuration and the registry clients. */
final class GlobalOptions {
  static final Path DEFAULT_CONFIG = Path.of("/etc/flatpull/config.toml");

  @Option(names = "--config", paramLabel = "FILE",
      description = "Configuration file (TOML). Default: $FLATPULL_CONFIG, else /etc/flatpull/config.toml if it exists.")
  Path config;

  @Option(names = "--plain-http", description = "Use plain HTTP for registries that have no hosts.toml.")
  boolean plainHttp;

  @Option(names = "--platform", paramLabel = "OS/ARCH[/VARIANT]",
      description = "Platform to select from an image index. Default: this machine's.")
  String platform;

  FlatpullConfig load() throws ConfigException {
    Path file = configFile();
    FlatpullConfig c = file == null ? FlatpullConfig.DEFAULTS : FlatpullConfig.load(file);
    if (plainHttp) {
      c = c.withRegistry(c.registry().withPlainHttp(true));
    }
    return c;
  }

  /** These options as arguments, for a child process that must use the same configuration. */
  java.util.List<String> asArguments() {
    java.util.List<String> args = new java.util.ArrayList<>();
    Path file = configFile();
    if (file != null) {
      args.add("--config");
      args.add(file.toAbsolutePath().toString());
    }
    if (plainHttp) {
      args.add("--plain-http");
    }
    if (platform != null) {
      args.add("--platform");
      args.add(platform);
    }
    return args;
  }

  private Path configFile() {
    Path file = config;
    if (file == null && System.getenv("FLATPULL_CONFIG") != null) {
      file = Path.of(System.getenv("FLATPULL_CONFIG"));
    }
    if (file == null && Files.isRegularFile(DEFAULT_CONFIG)) {
      file = DEFAULT_CONFIG;
    }
    return file;
  }

  RegistryClients clients(FlatpullConfig c, FetchListener listener) throws ConfigException {
    return RegistryClients.create(c, listener);
  }

  Platform platform() {
    return platform == null ? Platform.current() : Platform.parse(platform);
  }
}
