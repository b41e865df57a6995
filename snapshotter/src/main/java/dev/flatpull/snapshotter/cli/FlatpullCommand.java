package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.ConfigException;
import dev.flatpull.core.DigestMismatchException;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.layer.LayerFormatException;
import dev.flatpull.fetcher.oci.ManifestFormatException;
import dev.flatpull.fetcher.oci.UnsupportedMediaTypeException;
import dev.flatpull.fetcher.registry.RegistryAuthenticationException;
import dev.flatpull.fetcher.registry.RegistryException;
import dev.flatpull.fetcher.registry.RegistryNotFoundException;
import dev.flatpull.manager.BackgroundInit;
import java.io.FileNotFoundException;
import java.io.PrintWriter;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

/** The {@code flatpull} command line. Failures become exit codes here and only here. */
@Command(
    name = "flatpull",
    mixinStandardHelpOptions = true,
    version = "flatpull " + FlatpullCommand.VERSION,
    description = "Lazily pulled container images for containerd: inspect, read, convert and mount images.",
    subcommands = {InspectCommand.class, CatCommand.class, ConvertCommand.class, MountCommand.class, ServeCommand.class,
        DoctorCommand.class, RecordCommand.class, TraceCommand.class, RuntimeImageCommand.class, CacheCommand.class,
        ReplaceManagerCommand.class, FuseManagerCommand.class,
        CommandLine.HelpCommand.class})
public final class FlatpullCommand implements Runnable {
  static final String VERSION = "0.1.0";
  /** Exit codes: stable, documented in docs/cli.md. */
  static final int USAGE = 2;
  static final int CONFIG = 3;
  static final int NOT_FOUND = 4;
  static final int VERIFICATION = 5;
  static final int REGISTRY = 6;
  static final int FORMAT = 7;
  static final int NOT_READY = 8;
  static final int LOW_OVERLAP = 9;
  static final int FAILURE = 1;

  /** Holds the options shared by all commands, wherever on the command line they stand. */
  @Mixin GlobalOptions global;

  @Override
  public void run() {
    new CommandLine(this).usage(System.out);
  }

  /**
   * Netty warns on every unix-socket channel that {@code SO_KEEPALIVE} does not apply to it (harmless, see
   * docs/development.md); held here because java.util.logging forgets the level of a logger nobody references.
   */
  private static final java.util.logging.Logger NETTY_BOOTSTRAP =
      java.util.logging.Logger.getLogger("io.grpc.netty.shaded.io.netty.bootstrap");

  static {
    NETTY_BOOTSTRAP.setLevel(java.util.logging.Level.SEVERE);
  }

  public static void main(String[] args) {
    // One line per record: daemons' logs are read with journalctl and grep.
    System.setProperty("java.util.logging.SimpleFormatter.format", "%1$tFT%1$tT.%1$tL %4$s %3$s: %5$s%6$s%n");
    if (args.length > 0 && args[0].equals(FuseManagerCommand.NAME)) {
      // A manager that replaces one that died serves the running containers' mounts only once started: its slowest
      // independent parts begin before picocli parses the command line (picocli's classes, of class-file version 49,
      // are in no class-data archive), and picocli builds the model of this one command, not of every command
      // (50-60 ms of the manager's start).
      BackgroundInit.start();
      CommandLine manager = new CommandLine(new FuseManagerCommand());
      manager.setCommandName("flatpull " + FuseManagerCommand.NAME);
      System.exit(execute(manager, java.util.Arrays.copyOfRange(args, 1, args.length)));
    }
    System.exit(execute(args));
  }

  /** Runs the command line and returns the exit code; used by tests as well as {@link #main}. */
  public static int execute(String... args) {
    return execute(new CommandLine(new FlatpullCommand()), args);
  }

  private static int execute(CommandLine cli, String... args) {
    cli.setExecutionExceptionHandler((ex, commandLine, parseResult) -> {
      PrintWriter err = commandLine.getErr();
      err.println("flatpull: " + describe(ex));
      err.flush();
      return exitCode(ex);
    });
    return cli.execute(args);
  }

  static String describe(Throwable ex) {
    String kind =
        ex instanceof DigestMismatchException ? "verification failed: "
            : ex instanceof SizeLimitExceededException ? "limit exceeded: "
            : ex instanceof ConfigException ? "configuration error: "
            : ex instanceof dev.flatpull.trace.probe.NotReadyException ? "not ready, no trace written: "
            : ex instanceof dev.flatpull.trace.TraceFormatException ? "malformed trace: "
            : ex instanceof dev.flatpull.runtimeimage.RuntimeImageFormatException ? "malformed runtime image: "
            : ex instanceof dev.flatpull.runtimeimage.RuntimeImageMismatchException
                ? "runtime image or trace does not fit the image: "
            : ex instanceof dev.flatpull.runtimeimage.RuntimeImageOverlapException ? "not derived: "
            : ex instanceof IllegalArgumentException ? "invalid argument: "
            : "";
    return kind + ex.getMessage();
  }

  static int exitCode(Throwable ex) {
    if (ex instanceof ConfigException) {
      return CONFIG;
    }
    if (ex instanceof RegistryNotFoundException || ex instanceof FileNotFoundException) {
      return NOT_FOUND;
    }
    if (ex instanceof DigestMismatchException) {
      return VERIFICATION;
    }
    if (ex instanceof RegistryAuthenticationException || ex instanceof RegistryException) {
      return REGISTRY;
    }
    if (ex instanceof dev.flatpull.trace.probe.NotReadyException) {
      return NOT_READY;
    }
    if (ex instanceof dev.flatpull.runtimeimage.RuntimeImageOverlapException) {
      return LOW_OVERLAP;
    }
    if (ex instanceof dev.flatpull.trace.TraceFormatException
        || ex instanceof dev.flatpull.runtimeimage.RuntimeImageFormatException
        || ex instanceof dev.flatpull.runtimeimage.RuntimeImageMismatchException) {
      return FORMAT;
    }
    if (ex instanceof LayerFormatException || ex instanceof ManifestFormatException
        || ex instanceof UnsupportedMediaTypeException || ex instanceof SizeLimitExceededException) {
      return FORMAT;
    }
    if (ex instanceof IllegalArgumentException) {
      return USAGE;
    }
    return FAILURE;
  }
}
