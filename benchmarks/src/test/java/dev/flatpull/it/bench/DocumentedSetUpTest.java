package dev.flatpull.it.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.it.DocumentedSetUp;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** The DaemonSet runs flatpull as the systemd unit does: the daemon's JVM options and the two processes' limit. */
class DocumentedSetUpTest {
  @Test
  void theDaemonSet_andTheUnit_giveTheSameJavaOptionsAndMemoryLimit() throws Exception {
    String yaml = Files.readString(Path.of("../docs/examples/kubernetes/flatpull.yaml"));
    Matcher opts = Pattern.compile("name: FLATPULL_JAVA_OPTS\\s+value: \"([^\"]*)\"").matcher(yaml);
    assertTrue(opts.find(), "the DaemonSet sets FLATPULL_JAVA_OPTS");
    assertEquals(DocumentedSetUp.daemonJavaOptions(), java.util.List.of(opts.group(1).split("\\s+")));
    Matcher limit = Pattern.compile("limits:\\s+memory: (\\d+)(Mi|Gi)").matcher(yaml);
    assertTrue(limit.find(), "the DaemonSet limits memory");
    assertEquals(DocumentedSetUp.memoryLimitBytes().orElseThrow(),
        Long.parseLong(limit.group(1)) << (limit.group(2).equals("Gi") ? 30 : 20));
    assertTrue(DocumentedSetUp.daemonJavaOptions().contains("-Xmx1g"), "the options are read");
  }
}
