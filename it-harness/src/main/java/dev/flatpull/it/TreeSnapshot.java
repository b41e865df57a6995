package dev.flatpull.it;

import dev.flatpull.core.Digest;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.UserDefinedFileAttributeView;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Everything observable about a directory tree that an image must reproduce: per path its type, permission bits,
 * owner, size and content digest, modification time, link target, device numbers, {@code user.*} xattrs, and which
 * other paths are hard links to it. Two trees are equal when their snapshots are.
 */
public final class TreeSnapshot {
  private final Map<String, String> entries = new TreeMap<>();

  private TreeSnapshot() {}

  public static TreeSnapshot of(Path root) throws IOException {
    TreeSnapshot s = new TreeSnapshot();
    Map<Object, List<String>> byInode = new HashMap<>();
    List<Path> paths;
    try (var walk = Files.walk(root)) {
      paths = walk.toList();
    }
    Map<String, StringBuilder> lines = new TreeMap<>();
    for (Path p : paths) {
      String rel = root.relativize(p).toString();
      Map<String, Object> a = Files.readAttributes(p, "unix:mode,uid,gid,size,rdev,ino,nlink,lastModifiedTime", LinkOption.NOFOLLOW_LINKS);
      int mode = (Integer) a.get("mode");
      int type = mode & 0170000;
      StringBuilder b = new StringBuilder();
      b.append(String.format("type=%o perm=%04o uid=%s gid=%s", type, mode & 07777, a.get("uid"), a.get("gid")));
      switch (type) {
        case 0100000 -> {
          b.append(" size=").append(a.get("size")).append(" sha256=").append(sha256(p))
              .append(" mtime=").append(((java.nio.file.attribute.FileTime) a.get("lastModifiedTime")).toInstant().getEpochSecond());
          if ((Integer) a.get("nlink") > 1) {
            byInode.computeIfAbsent(a.get("ino"), k -> new ArrayList<>()).add(rel);
          }
        }
        case 0120000 -> b.append(" target=").append(Files.readSymbolicLink(p));
        case 0020000, 0060000 -> b.append(" rdev=").append(a.get("rdev"));
        default -> {}
      }
      if (type == 0100000 || type == 0040000) {
        UserDefinedFileAttributeView x = Files.getFileAttributeView(p, UserDefinedFileAttributeView.class);
        TreeSet<String> names = new TreeSet<>(x.list());
        for (String n : names) {
          ByteBuffer v = ByteBuffer.allocate(x.size(n));
          x.read(n, v);
          b.append(" user.").append(n).append('=').append(HexFormat.of().formatHex(v.array()));
        }
      }
      lines.put(rel, b);
    }
    for (List<String> group : byInode.values()) {
      if (group.size() > 1) {
        for (String member : group) {
          lines.get(member).append(" links=").append(new TreeSet<>(group));
        }
      }
    }
    lines.forEach((k, v) -> s.entries.put(k, v.toString()));
    return s;
  }

  private static String sha256(Path p) throws IOException {
    MessageDigest md = Digest.newMessageDigest("sha256");
    byte[] buf = new byte[1 << 16];
    try (InputStream in = Files.newInputStream(p, LinkOption.NOFOLLOW_LINKS)) {
      int n;
      while ((n = in.read(buf)) > 0) {
        md.update(buf, 0, n);
      }
    }
    return HexFormat.of().formatHex(md.digest()).substring(0, 16);
  }

  public int size() {
    return entries.size();
  }

  public String get(String path) {
    return entries.get(path);
  }

  /** Up to {@code max} differences with {@code other}, one line each; empty when the trees are equal. */
  public List<String> differences(TreeSnapshot other, int max) {
    List<String> out = new ArrayList<>();
    TreeSet<String> all = new TreeSet<>(entries.keySet());
    all.addAll(other.entries.keySet());
    for (String k : all) {
      String a = entries.get(k);
      String b = other.entries.get(k);
      if (a == null || !a.equals(b)) {
        out.add(k + ":\n    expected " + a + "\n    actual   " + b);
        if (out.size() >= max) {
          break;
        }
      }
    }
    return out;
  }
}
