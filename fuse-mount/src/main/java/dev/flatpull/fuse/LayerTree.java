package dev.flatpull.fuse;

import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The file-system view of one layer, as overlayfs expects a lower directory to look: every entry of the verified index
 * (parents the TOC omits become plain directories), hard links sharing one node, whiteouts ({@code .wh.NAME}) shown as
 * character devices 0:0 named NAME, and opaque markers ({@code .wh..wh..opq}) turned into
 * {@code trusted.overlay.opaque=y} on their directory. Lookups are one hash-map access. Immutable after construction,
 * so thread-safe; building it touches no network.
 */
public final class LayerTree {
  public static final String OPAQUE_XATTR = "trusted.overlay.opaque";

  /** What a node is, in st_mode terms. */
  public enum Kind {
    DIR,
    REG,
    SYMLINK,
    CHAR,
    BLOCK,
    FIFO
  }

  /** One inode. For {@link Kind#REG} nodes {@code content} is the entry whose chunks hold the bytes. */
  public static final class Node {
    public final long ino;
    public final Kind kind;
    public final int mode;
    public final int uid;
    public final int gid;
    public final long size;
    public final Instant modTime;
    public final String symlinkTarget;
    public final int devMajor;
    public final int devMinor;
    public final Map<String, byte[]> xattrs;
    public final LayerEntry content;
    // Paths of a directory's entries (the index's own strings: a name per entry would cost a string per entry), null
    // for every other kind.
    final List<String> childPaths;
    int links = 1;

    Node(long ino, Kind kind, int mode, int uid, int gid, long size, Instant modTime, String symlinkTarget,
        int devMajor, int devMinor, Map<String, byte[]> xattrs, LayerEntry content) {
      this.ino = ino;
      this.kind = kind;
      this.mode = mode;
      this.uid = uid;
      this.gid = gid;
      this.size = size;
      this.modTime = modTime;
      this.symlinkTarget = symlinkTarget;
      this.devMajor = devMajor;
      this.devMinor = devMinor;
      this.xattrs = xattrs;
      this.content = content;
      this.childPaths = kind == Kind.DIR ? new ArrayList<>() : null;
    }

    /** Names of a directory's entries, in layer order. */
    public List<String> children() {
      if (childPaths == null) {
        return List.of();
      }
      return new java.util.AbstractList<>() {
        @Override
        public String get(int i) {
          String p = childPaths.get(i);
          return p.substring(p.lastIndexOf('/') + 1);
        }

        @Override
        public int size() {
          return childPaths.size();
        }
      };
    }

    /** Hard-link count: names for a file, 2 plus subdirectories for a directory. */
    public int links() {
      return links;
    }
  }

  private final Map<String, Node> byPath = new HashMap<>();
  private long nextIno = 1;
  private long totalBytes;

  private LayerTree() {}

  /** Builds the tree of a layer from its verified index. */
  public static LayerTree of(LayerIndex index) {
    LayerTree t = new LayerTree();
    t.byPath.put("", t.dir(0755, 0, 0, Instant.EPOCH, Map.of()));
    Map<String, LayerEntry> deferredLinks = new LinkedHashMap<>();
    for (LayerEntry e : index.entries()) {
      if (e.name().isEmpty()) {
        Node root = t.byPath.get("");
        Node replaced = t.dir(e.mode(), e.uid(), e.gid(), e.modTime(), e.xattrs());
        replaced.childPaths.addAll(root.childPaths);
        t.byPath.put("", replaced);
        continue;
      }
      if (e.isOpaqueMarker()) {
        Node dir = t.ensureDir(e.parent());
        if (dir.kind == Kind.DIR) {
          dir.xattrs.put(OPAQUE_XATTR, "y".getBytes(StandardCharsets.US_ASCII));
        }
        continue;
      }
      if (e.type() == EntryType.HARDLINK) {
        deferredLinks.put(e.name(), e);
        continue;
      }
      if (e.isWhiteout()) {
        String hidden = e.parent().isEmpty() ? e.baseName().substring(LayerEntry.WHITEOUT_PREFIX.length())
            : e.parent() + "/" + e.baseName().substring(LayerEntry.WHITEOUT_PREFIX.length());
        t.add(hidden, t.node(Kind.CHAR, 0, e.uid(), e.gid(), 0, e.modTime(), "", 0, 0, Map.of(), null));
        continue;
      }
      Node n = switch (e.type()) {
        case DIR -> t.dir(e.mode(), e.uid(), e.gid(), e.modTime(), e.xattrs());
        case REG -> t.node(Kind.REG, e.mode(), e.uid(), e.gid(), e.size(), e.modTime(), "", 0, 0, e.xattrs(), e);
        case SYMLINK -> t.node(Kind.SYMLINK, 0777, e.uid(), e.gid(), e.linkName().getBytes(StandardCharsets.UTF_8).length,
            e.modTime(), e.linkName(), 0, 0, e.xattrs(), null);
        case CHAR -> t.node(Kind.CHAR, e.mode(), e.uid(), e.gid(), 0, e.modTime(), "", e.devMajor(), e.devMinor(), e.xattrs(), null);
        case BLOCK -> t.node(Kind.BLOCK, e.mode(), e.uid(), e.gid(), 0, e.modTime(), "", e.devMajor(), e.devMinor(), e.xattrs(), null);
        case FIFO -> t.node(Kind.FIFO, e.mode(), e.uid(), e.gid(), 0, e.modTime(), "", 0, 0, e.xattrs(), null);
        case HARDLINK -> throw new IllegalStateException("handled above");
      };
      Node existing = t.byPath.get(e.name());
      if (n.kind == Kind.DIR && existing != null && existing.kind == Kind.DIR) {
        // A directory listed after its children (or twice): keep the children, take the attributes.
        n.childPaths.addAll(existing.childPaths);
      }
      t.add(e.name(), n);
    }
    for (LayerEntry link : deferredLinks.values()) {
      Node target = t.byPath.get(link.linkName());
      if (target == null || target.kind == Kind.DIR) {
        continue;
      }
      target.links++;
      t.add(link.name(), target);
    }
    t.countSubdirectories();
    return t;
  }

  private void countSubdirectories() {
    for (Map.Entry<String, Node> e : byPath.entrySet()) {
      Node n = e.getValue();
      if (n.kind != Kind.DIR) {
        continue;
      }
      int subdirs = 0;
      for (String child : n.childPaths) {
        Node c = byPath.get(child);
        if (c != null && c.kind == Kind.DIR) {
          subdirs++;
        }
      }
      n.links = 2 + subdirs;
    }
  }

  private Node dir(int mode, int uid, int gid, Instant modTime, Map<String, byte[]> xattrs) {
    return node(Kind.DIR, mode, uid, gid, 0, modTime, "", 0, 0, xattrs, null);
  }

  private Node node(Kind kind, int mode, int uid, int gid, long size, Instant modTime, String target, int major,
      int minor, Map<String, byte[]> xattrs, LayerEntry content) {
    if (kind == Kind.REG) {
      totalBytes += size;
    }
    // Directories may gain the opaque marker's xattr; every other node keeps the index's (immutable) map.
    return new Node(nextIno++, kind, mode, uid, gid, size, modTime, target, major, minor,
        kind == Kind.DIR ? new LinkedHashMap<>(xattrs) : xattrs, content);
  }

  /**
   * The node at {@code path}, made (with every missing parent) a plain directory when the index has none. A loop, not
   * a recursion: a layer may legally hold a path thousands of directories deep, and the stack must not depend on it.
   */
  private Node ensureDir(String path) {
    Node n = byPath.get(path);
    if (n != null) {
      return n;
    }
    ArrayDeque<String> missing = new ArrayDeque<>();
    String p = path;
    while ((n = byPath.get(p)) == null) {
      missing.push(p);
      int slash = p.lastIndexOf('/');
      p = slash < 0 ? "" : p.substring(0, slash);
    }
    for (String m : missing) {
      Node d = dir(0755, 0, 0, Instant.EPOCH, Map.of());
      byPath.put(m, d);
      n.childPaths.add(m);
      n = d;
    }
    return n;
  }

  private void add(String path, Node n) {
    int slash = path.lastIndexOf('/');
    String parent = slash < 0 ? "" : path.substring(0, slash);
    Node dir = ensureDir(parent);
    if (byPath.put(path, n) == null && dir.childPaths != null) {
      dir.childPaths.add(path);
    }
  }

  /** The node at a FUSE path ({@code /}, {@code /usr/bin}). */
  public Optional<Node> lookup(String fusePath) {
    String p = fusePath.length() > 1 && fusePath.startsWith("/") ? fusePath.substring(1) : fusePath.equals("/") ? "" : fusePath;
    return Optional.ofNullable(byPath.get(p));
  }

  /** Number of paths (hard links count once per name). */
  public int size() {
    return byPath.size();
  }

  /** Sum of regular file sizes, for statfs. */
  public long totalBytes() {
    return totalBytes;
  }
}
