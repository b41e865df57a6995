package dev.flatpull.fetcher.tar;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Instant;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * A layer's tar made in memory, entry by entry, as real tools write it: a file's parent directories each have their
 * entry before its first file. For layers made on purpose: tests, benchmarks, samples.
 */
public final class LayerTar {
  private final ByteArrayOutputStream out = new ByteArrayOutputStream();
  private final Set<String> dirs = new HashSet<>();

  /** A tar of {@code files} (path to content, in the map's order), each 0644 and owned by root. */
  public static byte[] of(Map<String, byte[]> files) {
    LayerTar tar = new LayerTar();
    files.forEach(tar::file);
    return tar.bytes();
  }

  /** A tar of regular files {@code f0}, {@code f1}, ... holding {@code contents[i]}, with modes {@code modes[i]}. */
  public static byte[] numbered(int[] modes, byte[]... contents) {
    LayerTar tar = new LayerTar();
    for (int i = 0; i < contents.length; i++) {
      tar.file("f" + i, contents[i], modes[i]);
    }
    return tar.bytes();
  }

  /** The same, every file 0644. */
  public static byte[] numbered(byte[]... contents) {
    int[] modes = new int[contents.length];
    java.util.Arrays.fill(modes, 0644);
    return numbered(modes, contents);
  }

  /** The regular file {@code path}, 0644, owned by root. */
  public LayerTar file(String path, byte[] content) {
    return file(path, content, 0644);
  }

  /** The regular file {@code path} with permission bits {@code mode}, owned by root. */
  public LayerTar file(String path, byte[] content, int mode) {
    return entry(TarHeader.regular(path, content.length, mode, Instant.EPOCH), content);
  }

  /** The entry {@code h}, with {@code content} if it is a regular file, after its parents' entries if missing. */
  public LayerTar entry(TarHeader h, byte[] content) {
    String name = h.name();
    for (int slash = name.indexOf('/'); slash > 0 && slash < name.length() - 1; slash = name.indexOf('/', slash + 1)) {
      String dir = name.substring(0, slash + 1);
      if (dirs.add(dir)) {
        write(new TarHeader(dir, TarHeader.DIR, 0, 0755, 0, 0, "", "", Instant.EPOCH, "", 0, 0, Map.of()),
            new byte[0]);
      }
    }
    if (h.type() == TarHeader.DIR) {
      dirs.add(name.endsWith("/") ? name : name + "/");
    }
    write(h, content);
    return this;
  }

  /** The archive: the entries so far and its end (two zero blocks). */
  public byte[] bytes() {
    return Arrays.copyOf(out.toByteArray(), out.size() + 2 * TarWriter.BLOCK);
  }

  private void write(TarHeader h, byte[] content) {
    try {
      TarWriter.writeEntry(out, h, content);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
