package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.ConfigException;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClients;
import java.nio.file.Files;
import java.nio.file.Path;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * Options every command takes, and what they build: the configuration and the registry clients. Mixed into the root
 * command, the commands that group others, and every command that runs, so that each option may stand before or after
 * the subcommand ({@code flatpull --plain-http cat ...} as well as {@code flatpull cat --plain-http ...}); wherever
 * it is given, the value lands in the root command's instance, and every reader asks that one.
 */
final class GlobalOptions {
  static final Path DEFAULT_CONFIG = Path.of("/etc/flatpull/config.toml");

  @Spec(Spec.Target.MIXEE)
  CommandSpec mixee;

  private Path config;
  private boolean plainHttp;
  private String platform;

  @Option(names = "--config", paramLabel = "FILE",
      description = "Configuration file (TOML). Default: $FLATPULL_CONFIG, else /etc/flatpull/config.toml if it exists.")
  void setConfig(Path file) {
    if (file != null) {
      shared().config = file;
    }
  }

  @Option(names = "--plain-http", description = "Use plain HTTP for registries that have no hosts.toml.")
  void setPlainHttp(boolean on) {
    // Picocli calls the setter with the default (false) when the option is absent from one command of the chain.
    shared().plainHttp |= on;
  }

  @Option(names = "--platform", paramLabel = "OS/ARCH[/VARIANT]",
      description = "Platform to select from an image index. Default: this machine's.")
  void setPlatform(String p) {
    if (p != null) {
      shared().platform = p;
    }
  }

  /** The instance of the root command, which holds the values; this one when the command runs on its own. */
  private GlobalOptions shared() {
    if (mixee != null && mixee.root().userObject() instanceof FlatpullCommand root && root.global != null) {
      return root.global;
    }
    return this;
  }

  FlatpullConfig load() throws ConfigException {
    GlobalOptions g = shared();
    Path file = g.configFile();
    FlatpullConfig c = file == null ? FlatpullConfig.DEFAULTS : FlatpullConfig.load(file);
    if (g.plainHttp) {
      c = c.withRegistry(c.registry().withPlainHttp(true));
    }
    return c;
  }

  /** These options as arguments, for a child process that must use the same configuration. */
  java.util.List<String> asArguments() {
    GlobalOptions g = shared();
    java.util.List<String> args = new java.util.ArrayList<>();
    Path file = g.configFile();
    if (file != null) {
      args.add("--config");
      args.add(file.toAbsolutePath().toString());
    }
    if (g.plainHttp) {
      args.add("--plain-http");
    }
    if (g.platform != null) {
      args.add("--platform");
      args.add(g.platform);
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
    String p = shared().platform;
    return p == null ? Platform.current() : Platform.parse(p);
  }
}
