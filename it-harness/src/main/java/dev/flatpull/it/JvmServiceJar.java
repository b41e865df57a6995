package dev.flatpull.it;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDateTime;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Stream;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;

/**
 * The benchmarks' JVM service as an executable jar: {@code HelloServer} (a resource beside this class) compiled by
 * this JDK for release 17, and its version as a resource. The same version gives the same bytes (fixed entry times),
 * so that an image built on two machines, or twice, is the same image.
 */
public final class JvmServiceJar {
  /** Where the jar sits in the image. */
  public static final String PATH = "opt/hello/hello.jar";
  /** The command that starts it with the image's JDK and its defaults. */
  public static final List<String> COMMAND = List.of("/usr/bin/java", "-jar", "/" + PATH);

  // Any fixed time, given as a local one: a zip entry stores its time without a zone, and setTime would convert.
  private static final LocalDateTime ENTRY_TIME = LocalDateTime.of(2020, 1, 1, 0, 0);

  private JvmServiceJar() {}

  public static byte[] build(String version) throws IOException {
    JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
    if (javac == null) {
      throw new IOException("this Java runtime has no compiler: the JVM service's jar needs a JDK to build");
    }
    Path work = Files.createTempDirectory("flatpull-jvm-service");
    try {
      Path source = work.resolve("HelloServer.java");
      try (InputStream in = JvmServiceJar.class.getResourceAsStream("jvm-service/HelloServer.java")) {
        if (in == null) {
          throw new IOException("HelloServer.java is missing from the test harness's resources");
        }
        Files.copy(in, source);
      }
      Path classes = Files.createDirectories(work.resolve("classes"));
      ByteArrayOutputStream diagnostics = new ByteArrayOutputStream();
      if (javac.run(null, diagnostics, diagnostics, "--release", "17", "-d", classes.toString(),
          source.toString()) != 0) {
        throw new IOException("compiling HelloServer.java failed: " + diagnostics);
      }
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      try (JarOutputStream jar = new JarOutputStream(bytes); Stream<Path> compiled = Files.list(classes)) {
        put(jar, "META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nMain-Class: HelloServer\r\n\r\n"
            .getBytes(StandardCharsets.US_ASCII));
        for (Path c : compiled.sorted().toList()) {
          put(jar, c.getFileName().toString(), Files.readAllBytes(c));
        }
        put(jar, "version.txt", (version + "\n").getBytes(StandardCharsets.UTF_8));
      }
      return bytes.toByteArray();
    } finally {
      Processes.deleteTree(work);
    }
  }

  private static void put(JarOutputStream jar, String name, byte[] content) throws IOException {
    JarEntry e = new JarEntry(name);
    e.setTimeLocal(ENTRY_TIME);
    jar.putNextEntry(e);
    jar.write(content);
    jar.closeEntry();
  }
}
