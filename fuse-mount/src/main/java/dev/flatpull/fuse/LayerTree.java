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
  /**
   * The namespace of extended attributes that the kernel's own users act on (overlayfs reads {@code trusted.overlay.*}
   * from its lower layers: opaque directories, redirects, metacopy). A layer's TOC may carry such attributes itself;
   * they are never shown, so that an image cannot steer overlayfs. The ones overlayfs needs are derived from the
   * layer's whiteouts and opaque markers, as the OCI spec defines them ({@link #OPAQUE_XATTR}).
   */
  static final String TRUSTED = "trusted.";

  /** {@code xattrs} without the {@link #TRUSTED} namespace (the same map when it has none, as nearly every one). */
  static Map<String, byte[]> shown(Map<String, byte[]> xattrs) {
    if (xattrs.isEmpty() || xattrs.keySet().stream().noneMatch(k -> k.startsWith(TRUSTED))) {
      return xattrs;
    }
    Map<String, byte[]> out = new LinkedHashMap<>();
    xattrs.forEach((k, v) -> {
      if (!k.startsWith(TRUSTED)) {
        out.put(k, v);
      }
    });
    return out;
  }

  /** What a node is, in st_mode terms. */
  public enum Kind {
    DIR,
    REG,
    SYMLINK,
    CHAR,
    BLOCK,
    FIFO
  }

  /**
   * One inode. Its attributes are read from the index entry it stands for (none for a directory the TOC omits), so
   * that a node costs a few references, not a copy of every field: a layer may have a million entries. For
   * {@link Kind#REG} nodes {@link #content} is the entry whose chunks hold the bytes.
   */
  public static final class Node {
    private final long ino;
    private final Kind kind;
    private final LayerEntry entry;
    private final boolean whiteout;
    // Directories only: their own map, which the opaque marker may add to.
    private final Map<String, byte[]> dirXattrs;
    // Paths of a directory's entries (the index's own strings: a name per entry would cost a string per entry), null
    // for every other kind.
    final List<String> childPaths;
    // A directory's own path ("" for the root; a directory has one name), for lookups by node; null for other kinds.
    String dirPath;
    int links = 1;

    Node(long ino, Kind kind, LayerEntry entry, boolean whiteout) {
      this.ino = ino;
      this.kind = kind;
      this.entry = entry;
      this.whiteout = whiteout;
      this.dirXattrs = kind == Kind.DIR ? new LinkedHashMap<>(entry == null ? Map.of() : shown(entry.xattrs())) : null;
      this.childPaths = kind == Kind.DIR ? new ArrayList<>() : null;
    }

    public long ino() {
      return ino;
    }

    public Kind kind() {
      return kind;
    }

    /** {@code st_mode}: the file type's bits and {@link #mode}. */
    public int stMode() {
      int type = switch (kind) {
        case DIR -> 0040000;
        case REG -> 0100000;
        case SYMLINK -> 0120000;
        case CHAR -> 0020000;
        case BLOCK -> 0060000;
        case FIFO -> 0010000;
      };
      return type | (mode() & 07777);
    }

    /** Permission bits with setuid, setgid and sticky. */
    public int mode() {
      if (whiteout) {
        return 0;
      }
      if (entry == null) {
        return 0755;
      }
      return kind == Kind.SYMLINK ? 0777 : entry.mode();
    }

    public int uid() {
      return entry == null ? 0 : entry.uid();
    }

    public int gid() {
      return entry == null ? 0 : entry.gid();
    }

    /** The file size; a symlink's is its target's length in bytes. */
    public long size() {
      return switch (kind) {
        case REG -> entry.size();
        case SYMLINK -> entry.linkName().getBytes(StandardCharsets.UTF_8).length;
        default -> 0;
      };
    }

    public Instant modTime() {
      return entry == null ? Instant.EPOCH : entry.modTime();
    }

    /** A symlink's target; empty for every other kind. */
    public String symlinkTarget() {
      return kind == Kind.SYMLINK ? entry.linkName() : "";
    }

    public int devMajor() {
      return !whiteout && (kind == Kind.CHAR || kind == Kind.BLOCK) ? entry.devMajor() : 0;
    }

    public int devMinor() {
      return !whiteout && (kind == Kind.CHAR || kind == Kind.BLOCK) ? entry.devMinor() : 0;
    }

    /** Extended attributes, values as raw bytes. */
    public Map<String, byte[]> xattrs() {
      if (dirXattrs != null) {
        return dirXattrs;
      }
      return whiteout || entry == null ? Map.of() : shown(entry.xattrs());
    }

    /** The names of {@link #xattrs}, each followed by a NUL: what listxattr answers. */
    public byte[] xattrNameList() {
      java.io.ByteArrayOutputStream names = new java.io.ByteArrayOutputStream();
      for (String name : xattrs().keySet()) {
        names.writeBytes(name.getBytes(StandardCharsets.UTF_8));
        names.write(0);
      }
      return names.toByteArray();
    }

    /** For a regular file, the entry whose chunks hold its bytes; null otherwise. */
    public LayerEntry content() {
      return kind == Kind.REG ? entry : null;
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
  // Every node shown, at its inode number (null where a replaced node's number was): the kernel names nodes by number.
  private Node[] byIno;
  private long nextIno = 1;
  private long totalBytes;
  private boolean anyXattrs;

  private LayerTree() {}

  /** Builds the tree of a layer from its verified index. */
  public static LayerTree of(LayerIndex index) {
    LayerTree t = new LayerTree();
    Node top = t.node(Kind.DIR, null, false);
    top.dirPath = "";
    t.byPath.put("", top);
    Map<String, LayerEntry> deferredLinks = new LinkedHashMap<>();
    for (LayerEntry e : index.entries()) {
      if (e.name().isEmpty()) {
        Node root = t.byPath.get("");
        // The root keeps number 1: the kernel's protocol names it so.
        Node replaced = new Node(root.ino, Kind.DIR, e, false);
        replaced.dirPath = "";
        replaced.childPaths.addAll(root.childPaths);
        t.byPath.put("", replaced);
        continue;
      }
      if (e.isOpaqueMarker()) {
        Node dir = t.ensureDir(e.parent());
        if (dir.kind == Kind.DIR) {
          dir.dirXattrs.put(OPAQUE_XATTR, "y".getBytes(StandardCharsets.US_ASCII));
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
        t.add(hidden, t.node(Kind.CHAR, e, true));
        continue;
      }
      Node n = t.node(switch (e.type()) {
        case DIR -> Kind.DIR;
        case REG -> Kind.REG;
        case SYMLINK -> Kind.SYMLINK;
        case CHAR -> Kind.CHAR;
        case BLOCK -> Kind.BLOCK;
        case FIFO -> Kind.FIFO;
        case HARDLINK -> throw new IllegalStateException("handled above");
      }, e, false);
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
    t.byIno = new Node[Math.toIntExact(t.nextIno)];
    for (Node n : t.byPath.values()) {
      t.byIno[(int) n.ino] = n;
      t.anyXattrs |= !n.xattrs().isEmpty();
    }
    return t;
  }

  /**
   * Whether any node shows an extended attribute (its own, or an opaque directory's derived one). A layer with none
   * can tell the kernel it has no xattrs at all: overlayfs asks every regular file of a lower layer for
   * {@code trusted.overlay.metacopy} when it looks it up, and the kernel every executable for
   * {@code security.capability}, each a round trip that can only find nothing.
   */
  public boolean hasXattrs() {
    return anyXattrs;
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

  private Node node(Kind kind, LayerEntry entry, boolean whiteout) {
    Node n = new Node(nextIno++, kind, entry, whiteout);
    if (kind == Kind.REG) {
      totalBytes += n.size();
    }
    return n;
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
      Node d = node(Kind.DIR, null, false);
      d.dirPath = m;
      byPath.put(m, d);
      n.childPaths.add(m);
      n = d;
    }
    return n;
  }

  private void add(String path, Node n) {
    if (n.kind == Kind.DIR) {
      n.dirPath = path;
    }
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

  /** The node numbered {@code ino} ({@link Node#ino}; the root is 1), if the tree shows one. */
  public Optional<Node> node(long ino) {
    return ino > 0 && ino < byIno.length ? Optional.ofNullable(byIno[(int) ino]) : Optional.empty();
  }

  /** The entry {@code name} of directory {@code dir}, if it has one. */
  public Optional<Node> child(Node dir, String name) {
    if (dir.dirPath == null) {
      return Optional.empty();
    }
    return Optional.ofNullable(byPath.get(dir.dirPath.isEmpty() ? name : dir.dirPath + "/" + name));
  }

  /** A directory's entries, in layer order, with their names. */
  public void forEachChild(Node dir, java.util.function.BiPredicate<String, Node> visit) {
    if (dir.childPaths == null) {
      return;
    }
    for (String p : dir.childPaths) {
      Node c = byPath.get(p);
      if (c != null && !visit.test(p.substring(p.lastIndexOf('/') + 1), c)) {
        return;
      }
    }
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
