package dev.flatpull.it;

import dev.flatpull.fetcher.reference.ImageReference;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveOutputStream;
import org.apache.commons.compress.archivers.tar.TarConstants;

/**
 * A two-layer image built from real files (the running JDK's shared libraries and configuration files, which every
 * machine that builds flatpull has), written with commons-compress so that flatpull's own tar code is not the judge of
 * itself. The lower layer is gzip, the upper one uncompressed; the upper one deletes, replaces and adds files.
 * {@link #files} is what the merged image must show.
 */
public final class TestImage {
  /** The merged view: path (no leading slash) to content, for every regular file. */
  public final Map<String, byte[]> files = new LinkedHashMap<>();
  /** Paths the upper layer deletes. */
  public final Set<String> deleted = new TreeSet<>();
  /** A small file in the large lower layer, for lazy-transfer checks. */
  public final String smallFile = "etc/hostname";
  public final long lowerLayerSize;
  public final ImageReference reference;

  private TestImage(ImageReference reference, long lowerLayerSize) {
    this.reference = reference;
    this.lowerLayerSize = lowerLayerSize;
  }

  /** Builds the image and pushes it to {@code registry} as {@code REPO:TAG}. */
  public static TestImage push(RegistryServer registry, String repository, String tag) throws IOException {
    return push(registry.address(), repository, tag);
  }

  /** Builds the image and pushes it over plain HTTP to the registry at {@code HOST:PORT}. */
  public static TestImage push(String registryAddress, String repository, String tag) throws IOException {
    return push(registryAddress, repository, tag, null);
  }

  /**
   * Like {@link #push(String, String, String)}, but with {@code etc/variant} holding {@code variant} in the lower
   * layer: a different layer (and image) that shares every other file with the plain one.
   */
  public static TestImage push(String registryAddress, String repository, String tag, String variant) throws IOException {
    ImageReference ref = ImageReference.parse(registryAddress + "/" + repository + ":" + tag);
    Path jdk = Path.of(System.getProperty("java.home"));
    Map<String, byte[]> lower = new LinkedHashMap<>();
    try (var libs = Files.list(jdk.resolve("lib"))) {
      for (Path p : libs.filter(p -> p.toString().endsWith(".so")).sorted().toList()) {
        lower.put("usr/lib/jvm/lib/" + p.getFileName(), Files.readAllBytes(p));
      }
    }
    Path libjvm = jdk.resolve("lib/server/libjvm.so");
    if (Files.isRegularFile(libjvm)) {
      lower.put("usr/lib/jvm/lib/server/libjvm.so", Files.readAllBytes(libjvm));
    }
    Path conf = jdk.resolve("conf").toRealPath();
    try (var walk = Files.walk(conf)) {
      for (Path p : walk.filter(Files::isRegularFile).sorted().toList()) {
        lower.put("etc/java/" + conf.relativize(p), Files.readAllBytes(p));
      }
    }
    lower.put("etc/hostname", "flatpull-it\n".getBytes(StandardCharsets.US_ASCII));
    lower.put("etc/remove-me", "doomed\n".getBytes(StandardCharsets.US_ASCII));
    lower.put("etc/motd", "lower\n".getBytes(StandardCharsets.US_ASCII));
    if (variant != null) {
      lower.put("etc/variant", variant.getBytes(StandardCharsets.UTF_8));
    }

    Map<String, byte[]> upper = new LinkedHashMap<>();
    upper.put("etc/motd", "upper\n".getBytes(StandardCharsets.US_ASCII));
    upper.put("app/config.json", "{\"listen\":\":8080\"}\n".getBytes(StandardCharsets.US_ASCII));

    ByteArrayOutputStream lowerTar = new ByteArrayOutputStream();
    try (TarArchiveOutputStream tar = tar(lowerTar)) {
      writeDirsAndFiles(tar, lower);
      TarArchiveEntry sym = new TarArchiveEntry("usr/lib/jvm/lib/libjava-link.so", TarConstants.LF_SYMLINK);
      sym.setLinkName("libjava.so");
      tar.putArchiveEntry(sym);
      tar.closeArchiveEntry();
      TarArchiveEntry hard = new TarArchiveEntry("usr/lib/jvm/lib/libjava-hard.so", TarConstants.LF_LINK);
      hard.setLinkName("usr/lib/jvm/lib/libjava.so");
      tar.putArchiveEntry(hard);
      tar.closeArchiveEntry();
    }
    ByteArrayOutputStream upperTar = new ByteArrayOutputStream();
    try (TarArchiveOutputStream tar = tar(upperTar)) {
      writeDirsAndFiles(tar, upper);
      TarArchiveEntry whiteout = new TarArchiveEntry("etc/.wh.remove-me");
      tar.putArchiveEntry(whiteout);
      tar.closeArchiveEntry();
    }
    byte[] lowerBlob = ImagePusher.gzip(lowerTar.toByteArray());
    TestImage image = new TestImage(ref, lowerBlob.length);
    image.files.putAll(lower);
    image.files.putAll(upper);
    image.files.remove("etc/remove-me");
    image.files.put("usr/lib/jvm/lib/libjava-hard.so", lower.get("usr/lib/jvm/lib/libjava.so"));
    image.files.put("usr/lib/jvm/lib/libjava-link.so", lower.get("usr/lib/jvm/lib/libjava.so"));
    image.deleted.add("etc/remove-me");

    ImagePusher.push(ref, List.of(new ImagePusher.Layer(lowerTar.toByteArray(), true),
        new ImagePusher.Layer(upperTar.toByteArray(), false)));
    return image;
  }

  private static TarArchiveOutputStream tar(ByteArrayOutputStream out) {
    TarArchiveOutputStream t = new TarArchiveOutputStream(out);
    t.setLongFileMode(TarArchiveOutputStream.LONGFILE_POSIX);
    return t;
  }

  private static void writeDirsAndFiles(TarArchiveOutputStream tar, Map<String, byte[]> files) throws IOException {
    Set<String> dirs = new TreeSet<>(Comparator.naturalOrder());
    for (String f : files.keySet()) {
      for (int i = f.indexOf('/'); i > 0; i = f.indexOf('/', i + 1)) {
        dirs.add(f.substring(0, i));
      }
    }
    for (String d : dirs) {
      TarArchiveEntry e = new TarArchiveEntry(d + "/");
      e.setMode(040755);
      tar.putArchiveEntry(e);
      tar.closeArchiveEntry();
    }
    List<String> names = new ArrayList<>(files.keySet());
    for (String f : names) {
      TarArchiveEntry e = new TarArchiveEntry(f);
      e.setSize(files.get(f).length);
      e.setMode(f.endsWith(".so") ? 0100755 : 0100644);
      tar.putArchiveEntry(e);
      tar.write(files.get(f));
      tar.closeArchiveEntry();
    }
  }
}
