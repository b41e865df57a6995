package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * The command line of a FUSE manager from this build: what {@code serve} and {@code replace-manager} start. This very
 * program, as {@code flatpull fuse-manager} with the same configuration and the configured JVM options
 * ({@code fuse_manager_java_options}; the starting process's own are not passed on). The manager outlives the daemon
 * and loads classes lazily from its jar for as long as it runs, so it runs from a private copy: upgrading or
 * rebuilding the installed jar in place must not pull classes out from under it. Beside the copy, once trained, is
 * its class-data archive ({@link #archive}), which each start made after that maps.
 */
final class ManagerCommandLine implements Supplier<List<String>> {
  /** The manager command's option that trains the class-data archive and exits. */
  static final String TRAIN_CLASS_ARCHIVE = "--train-class-archive";

  private final FlatpullConfig config;
  private final GlobalOptions global;
  private final String classpath;
  private final Optional<Path> archive;

  private ManagerCommandLine(FlatpullConfig config, GlobalOptions global, String classpath, Optional<Path> archive) {
    this.config = config;
    this.global = global;
    this.classpath = classpath;
    this.archive = archive;
  }

  static ManagerCommandLine of(FlatpullConfig config, GlobalOptions global) throws java.io.IOException {
    String classpath = System.getProperty("java.class.path");
    Path jar = Path.of(classpath);
    Optional<Path> archive = Optional.empty();
    if (!classpath.contains(":") && classpath.endsWith(".jar") && Files.isRegularFile(jar)) {
      Path dir = Files.createDirectories(config.root().resolve("fuse-manager"));
      String name = "flatpull-" + Files.size(jar) + "-" + Files.getLastModifiedTime(jar).toMillis();
      Path copy = dir.resolve(name + ".jar");
      if (!Files.exists(copy)) {
        Path temp = Files.createTempFile(dir, "copy", ".tmp");
        Files.copy(jar, temp, StandardCopyOption.REPLACE_EXISTING);
        Files.move(temp, copy, StandardCopyOption.ATOMIC_MOVE);
      }
      classpath = copy.toString();
      // An archive holds one JVM's view of one jar: another JDK's would be refused at every start.
      archive = Optional.of(dir.resolve(name + "-java-" + System.getProperty("java.vm.version")
          .replaceAll("[^A-Za-z0-9.+_-]", "_") + ".jsa"));
    }
    return new ManagerCommandLine(config, global, classpath, archive);
  }

  /** A manager's command, mapping the class-data archive when it has been trained. */
  @Override
  public List<String> get() {
    return command(archive.filter(Files::isRegularFile).map(a -> "-XX:SharedArchiveFile=" + a));
  }

  /**
   * The class-data archive of this command's jar copy: the classes a manager loads, parsed and laid out once, which a
   * manager's start maps instead of loading them from the jar (measured: 1.3-1.5 s from exec to serving without, 0.7-0.8
   * s with; most of the pause of a takeover). Empty when the manager does not run from one jar (a development
   * classpath).
   */
  Optional<Path> archive() {
    return archive;
  }

  /** The command that trains the archive into {@code to}: the manager's start-up and warm-up, its classes dumped. */
  List<String> training(Path to) {
    List<String> cmd = command(Optional.of("-XX:ArchiveClassesAtExit=" + to));
    cmd.add(TRAIN_CLASS_ARCHIVE);
    return cmd;
  }

  private List<String> command(Optional<String> archiveOption) {
    List<String> cmd = new ArrayList<>();
    cmd.add(ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java"));
    cmd.addAll(config.snapshotter().fuseManagerJavaOptions());
    archiveOption.ifPresent(cmd::add);
    cmd.add("-cp");
    cmd.add(classpath);
    cmd.add(FlatpullCommand.class.getName());
    cmd.add(FuseManagerCommand.NAME);
    cmd.addAll(global.asArguments());
    return cmd;
  }
}
