package dev.flatpull.snapshotter.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;
import picocli.CommandLine.ParseResult;

class GlobalOptionsTest {
  @TempDir Path dir;

  /** The options as the command that runs sees them (the innermost subcommand of the parse). */
  private static GlobalOptions parsed(String... args) {
    ParseResult r = new CommandLine(new FlatpullCommand()).parseArgs(args);
    while (r.hasSubcommand()) {
      r = r.subcommand();
    }
    Object leaf = r.commandSpec().userObject();
    for (var f : leaf.getClass().getDeclaredFields()) {
      if (f.getType() == GlobalOptions.class) {
        try {
          f.setAccessible(true);
          return (GlobalOptions) f.get(leaf);
        } catch (IllegalAccessException e) {
          throw new AssertionError(e);
        }
      }
    }
    throw new AssertionError(leaf.getClass() + " takes no global options");
  }

  @Test
  void sharedOptions_beforeTheSubcommand_reachTheCommandThatRuns() throws Exception {
    Path config = Files.writeString(dir.resolve("c.toml"), "[registry]\nplain_http = false\n");
    GlobalOptions g = parsed("--plain-http", "--platform", "linux/arm64", "--config", config.toString(),
        "cat", "127.0.0.1:5000/a:b", "/etc/hostname");
    assertEquals(List.of("--config", config.toAbsolutePath().toString(), "--plain-http", "--platform", "linux/arm64"),
        g.asArguments());
    assertEquals("linux/arm64", g.platform().toString());
    FlatpullConfig c = g.load();
    assertTrue(c.registry().plainHttp(), "--plain-http before the subcommand overrides the file");
  }

  @Test
  void sharedOptions_afterTheSubcommand_andBetweenNestedOnes_workAsBefore() {
    assertEquals(List.of("--plain-http"), parsed("cat", "--plain-http", "r/a:b", "/x").asArguments());
    assertEquals(List.of("--plain-http", "--platform", "linux/amd64"),
        parsed("runtime-image", "--plain-http", "ls", "--platform", "linux/amd64", "r/a:b").asArguments());
    assertEquals(List.of("--plain-http"), parsed("--plain-http", "cache", "empty").asArguments());
  }

  @Test
  void anOptionGivenTwice_theLaterWins_andAbsentOnesStayUnset() {
    assertEquals(List.of("--platform", "linux/s390x"),
        parsed("--platform", "linux/arm64", "cat", "--platform", "linux/s390x", "r/a:b", "/x").asArguments());
    assertEquals(List.of(), parsed("cat", "r/a:b", "/x").asArguments().stream()
        .filter(a -> !a.equals("--config") && !a.endsWith(".toml")).toList());
  }
}
