package dev.flatpull.it;

import dev.flatpull.fetcher.reference.ImageReference;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Map;

/**
 * A two-layer image of a real Debian root file system: {@code debootstrap --variant=minbase bookworm} (device nodes,
 * hard links, symlinks, setuid binaries and all) tarred by GNU tar as the lower layer, and an upper layer that deletes
 * a file and a directory (whiteouts), hides a directory's content (opaque), replaces one file and adds others. The root
 * file system is built once per machine and reused.
 */
public final class DebianImage {
  public static final String SUITE = "bookworm";

  private DebianImage() {}

  /** The minbase root file system, built on first use under the temporary directory. */
  public static Path rootfs() throws IOException, InterruptedException {
    return rootfs("flatpull-it-debian-" + SUITE, List.of());
  }

  /** The minbase root file system with python3 (about 250 MB), built on first use under the temporary directory. */
  public static Path pythonRootfs() throws IOException, InterruptedException {
    return rootfs("flatpull-it-debian-" + SUITE + "-python3", List.of("--include=python3"));
  }

  /** The minbase root file system with nginx-light, built on first use under the temporary directory. */
  public static Path nginxRootfs() throws IOException, InterruptedException {
    return rootfs("flatpull-it-debian-" + SUITE + "-nginx", List.of("--include=nginx-light"));
  }

  /**
   * The minbase root file system with a headless JDK (openjdk-17-jdk-headless) and the benchmarks' JVM service at
   * {@link JvmServiceJar#PATH}, built on first use under the temporary directory.
   */
  public static Path jvmRootfs() throws IOException, InterruptedException {
    return rootfs("flatpull-it-debian-" + SUITE + "-jdk", List.of("--include=openjdk-17-jdk-headless"), root -> {
      aptClean(root);
      Path jar = root.resolve(JvmServiceJar.PATH);
      Files.createDirectories(jar.getParent());
      Files.write(jar, JvmServiceJar.build("1"));
    });
  }

  /** {@link #postgresRootfs()}'s entrypoint: starts the server in the foreground. */
  public static final String POSTGRES_START = "/usr/local/bin/postgres-start";

  /**
   * The minbase root file system with postgresql (15), the cluster Debian's package creates at install
   * ({@code /var/lib/postgresql/15/main}, configured in {@code /etc/postgresql/15/main}) and an entrypoint,
   * {@link #POSTGRES_START}, built on first use under the temporary directory.
   */
  public static Path postgresRootfs() throws IOException, InterruptedException {
    return rootfs("flatpull-it-debian-" + SUITE + "-postgresql", List.of("--include=postgresql"), root -> {
      aptClean(root);
      Path start = root.resolve(POSTGRES_START.substring(1));
      // What the postgres image's entrypoint does before its server: the socket's directory on the empty /run that
      // containerd mounts, and the server as the cluster's owner (postgres refuses to run as root), as pg_ctlcluster
      // would start it. A script, not sh -c: ctr takes a -c after the image for a flag of its own.
      Files.writeString(start, """
          #!/bin/sh
          set -e
          install -d -o postgres -g postgres -m 2775 /run/postgresql
          exec /usr/sbin/runuser -u postgres -- /usr/lib/postgresql/15/bin/postgres \\
            -D /var/lib/postgresql/15/main -c config_file=/etc/postgresql/15/main/postgresql.conf
          """);
      Files.setPosixFilePermissions(start, PosixFilePermissions.fromString("rwxr-xr-x"));
    });
  }

  /** Pushes a root file system as a one-layer gzip image {@code REGISTRY/REPOSITORY:TAG}. */
  public static ImageReference pushRootfs(Path rootfs, String registry, String repository, String tag)
      throws IOException, InterruptedException {
    ImageReference ref = ImageReference.parse(registry + "/" + repository + ":" + tag);
    ImagePusher.push(ref, List.of(new ImagePusher.Layer(tar(rootfs), true)));
    return ref;
  }

  /**
   * Pushes a root file system and one layer more above it, holding {@code upper} (path without a leading slash to
   * content), as a gzip image {@code REGISTRY/REPOSITORY:TAG}: the next version of an image, a few files changed.
   */
  public static ImageReference pushRootfsWithUpper(Path rootfs, Map<String, byte[]> upper, String registry,
      String repository, String tag) throws IOException, InterruptedException {
    Path work = Files.createTempDirectory("flatpull-debian-upper");
    try {
      for (Map.Entry<String, byte[]> f : upper.entrySet()) {
        Path file = work.resolve(f.getKey());
        Files.createDirectories(file.getParent());
        Files.write(file, f.getValue());
      }
      ImageReference ref = ImageReference.parse(registry + "/" + repository + ":" + tag);
      ImagePusher.push(ref, List.of(new ImagePusher.Layer(tar(rootfs), true),
          new ImagePusher.Layer(tar(work), true)));
      return ref;
    } finally {
      Processes.deleteTree(work);
    }
  }

  /** A root file system as a one-layer OCI image layout (uncompressed) at {@code dir}, image {@code tag}. */
  public static Path ociLayout(Path rootfs, Path dir, String tag) throws IOException, InterruptedException {
    return OciLayout.write(dir, tag, List.of(tar(rootfs)));
  }

  /**
   * Pushes the python3 image and converts it to eStargz with {@code flatpull convert}; returns
   * {@code REGISTRY/REPOSITORY:esgz} (the plain image stays as {@code :plain}).
   */
  public static String pushPythonEstargz(String registry, String repository) throws IOException, InterruptedException {
    ImageReference plain = pushPython(registry, repository, "plain");
    String esgz = registry + "/" + repository + ":esgz";
    Cli.Run convert = Cli.inProcess("convert", "--plain-http", "--quiet", plain.toString(), esgz);
    if (convert.exitCode() != 0) {
      throw new IOException("converting " + plain + " failed: " + convert.stderr());
    }
    return esgz;
  }

  /**
   * Builds under a lock file beside the tree: the integration tests run in two JVMs at once, and one must not delete
   * the tree the other is building.
   */
  private static Path rootfs(String name, List<String> options) throws IOException, InterruptedException {
    return rootfs(name, options, root -> {});
  }

  /**
   * Removes the packages debootstrap downloaded, as an image built with apt-get does with its {@code apt-get clean}.
   * The python and nginx images keep them: their figures in the docs were measured with them.
   */
  private static void aptClean(Path rootfs) throws IOException {
    Path archives = rootfs.resolve("var/cache/apt/archives");
    if (Files.isDirectory(archives)) {
      try (java.util.stream.Stream<Path> debs = Files.list(archives)) {
        for (Path deb : debs.filter(p -> p.getFileName().toString().endsWith(".deb")).toList()) {
          Files.delete(deb);
        }
      }
    }
  }

  /** What is added to a root file system after debootstrap, before it counts as built. */
  private interface Finish {
    void apply(Path rootfs) throws IOException, InterruptedException;
  }

  private static synchronized Path rootfs(String name, List<String> options, Finish finish)
      throws IOException, InterruptedException {
    Path base = Path.of(System.getProperty("java.io.tmpdir"), name);
    Path rootfs = base.resolve("rootfs");
    Path done = base.resolve("complete");
    if (Files.exists(done)) {
      return rootfs;
    }
    try (FileChannel lockFile = FileChannel.open(base.resolveSibling(name + ".lock"), StandardOpenOption.CREATE,
        StandardOpenOption.WRITE); FileLock lock = lockFile.lock()) {
      if (Files.exists(done)) {
        return rootfs; // the other JVM built it meanwhile
      }
      Path debootstrap = Processes.require("debootstrap");
      Processes.deleteTree(base);
      Files.createDirectories(base);
      List<String> cmd = new java.util.ArrayList<>(List.of(debootstrap.toString(), "--variant=minbase"));
      cmd.addAll(options);
      cmd.addAll(List.of(SUITE, rootfs.toString(), "http://deb.debian.org/debian"));
      Processes.run(cmd, 900).orThrow(List.of("debootstrap"));
      finish.apply(rootfs);
      Files.createFile(done);
      return rootfs;
    }
  }

  /**
   * Pushes the python3 root file system as a one-layer image {@code REGISTRY/REPOSITORY:TAG} (gzip, not lazily
   * readable; convert it to make it so).
   */
  public static ImageReference pushPython(String registry, String repository, String tag)
      throws IOException, InterruptedException {
    return pushRootfs(pythonRootfs(), registry, repository, tag);
  }

  /** Builds and pushes the image as {@code REGISTRY/REPOSITORY:TAG}. */
  public static ImageReference push(String registry, String repository, String tag) throws IOException, InterruptedException {
    byte[] lower = tar(rootfs());
    Path work = Files.createTempDirectory("flatpull-debian-layers");
    try {
      Path staging = Files.createDirectories(work.resolve("upper"));
      Files.createDirectories(staging.resolve("etc"));
      Files.createFile(staging.resolve("etc/.wh.motd"));
      Files.writeString(staging.resolve("etc/hostname"), "flatpull-debian\n", StandardCharsets.US_ASCII);
      Files.createDirectories(staging.resolve("var/log"));
      Files.createFile(staging.resolve("var/log/.wh.apt"));
      Files.createDirectories(staging.resolve("usr/share/doc/flatpull"));
      Files.createFile(staging.resolve("usr/share/doc/.wh..wh..opq"));
      Files.writeString(staging.resolve("usr/share/doc/flatpull/README"), "only this survives\n");
      Files.createDirectories(staging.resolve("usr/local/bin"));
      Path hello = staging.resolve("usr/local/bin/hello");
      Files.writeString(hello, "#!/bin/sh\necho hello\n");
      Files.setPosixFilePermissions(hello, PosixFilePermissions.fromString("rwxr-xr-x"));
      Files.createLink(staging.resolve("usr/local/bin/hello-again"), hello);
      Files.getFileAttributeView(hello, java.nio.file.attribute.UserDefinedFileAttributeView.class)
          .write("flatpull.note", java.nio.ByteBuffer.wrap("binary\0value".getBytes(StandardCharsets.ISO_8859_1)));
      ImageReference ref = ImageReference.parse(registry + "/" + repository + ":" + tag);
      ImagePusher.push(ref, List.of(new ImagePusher.Layer(lower, true), new ImagePusher.Layer(tar(staging), false)));
      return ref;
    } finally {
      Processes.deleteTree(work);
    }
  }

  /** {@code dir} as a tar archive made by GNU tar (numeric owners, every xattr, PAX, sorted names). */
  private static byte[] tar(Path dir) throws IOException, InterruptedException {
    Processes.require("tar");
    Path out = Files.createTempFile("flatpull-layer", ".tar");
    try {
      List<String> cmd = List.of("tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--format=pax",
          "--sort=name", "-C", dir.toString(), "-cf", out.toString(), ".");
      Processes.run(cmd, 300).orThrow(cmd);
      return Files.readAllBytes(out);
    } finally {
      Files.deleteIfExists(out);
    }
  }
}
