package dev.flatpull.fuse;

import dev.flatpull.fetcher.layer.EntryType;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fetcher.layer.LayerIndex;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The file-system view of one layer, as overlayfs expects a lower directory to look: every entry of the verified index
 * (parents the TOC omits become plain directories), hard links sharing one node, whiteouts ({@code .wh.NAME}) shown as
 * character devices 0:0 named NAME, and opaque markers ({@code .wh..wh..opq}) turned into
 * {@code trusted.overlay.opaque=y} on their directory. Immutable after construction, so thread-safe; building it
 * touches no network.
 *
 * <p>No Java object per path or per inode: a layer may have a million entries (docs/benchmarks.md, index memory).
 * Inodes are numbers with their attributes in arrays, the entry they stand for an entry number of the index; names are
 * numbers too, each with its directory, its inode and the entry whose last path component it is (a whiteout's, less
 * {@code .wh.}), found through one open-addressing table keyed by directory and name, whose probes compare the
 * index's own bytes. A {@link Node} is a view made for the caller.
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
   * One inode, as a view of the tree: its attributes are read from the index entry it stands for (none for a directory
   * the TOC omits). Equal when it is the same inode of the same tree. For {@link Kind#REG} nodes {@link #content} is
   * the entry whose chunks hold the bytes.
   */
  public static final class Node {
    private final LayerTree tree;
    private final int ino;
    private final Kind kind;
    private final boolean whiteout;
    // The index entry the node stands for, -1 for a directory the index omits. Attributes are read from its records;
    // the entry itself is made only for a file's content and for extended attributes.
    private final int entry;

    private Node(LayerTree tree, int ino) {
      this.tree = tree;
      this.ino = ino;
      this.kind = KINDS[tree.kinds[ino] & KIND_MASK];
      this.whiteout = (tree.kinds[ino] & WHITEOUT) != 0;
      this.entry = tree.entryOf[ino];
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
      if (entry < 0) {
        return 0755;
      }
      return kind == Kind.SYMLINK ? 0777 : tree.index.modeAt(entry);
    }

    public int uid() {
      return entry < 0 ? 0 : tree.index.uidAt(entry);
    }

    public int gid() {
      return entry < 0 ? 0 : tree.index.gidAt(entry);
    }

    /** The file size; a symlink's is its target's length in bytes. */
    public long size() {
      return switch (kind) {
        case REG -> tree.index.sizeAt(entry);
        case SYMLINK -> tree.index.linkNameAt(entry).getBytes(StandardCharsets.UTF_8).length;
        default -> 0;
      };
    }

    public Instant modTime() {
      return entry < 0 ? Instant.EPOCH : tree.index.modTimeAt(entry);
    }

    /** A symlink's target; empty for every other kind. */
    public String symlinkTarget() {
      return kind == Kind.SYMLINK ? tree.index.linkNameAt(entry) : "";
    }

    public int devMajor() {
      return !whiteout && (kind == Kind.CHAR || kind == Kind.BLOCK) ? tree.index.devMajorAt(entry) : 0;
    }

    public int devMinor() {
      return !whiteout && (kind == Kind.CHAR || kind == Kind.BLOCK) ? tree.index.devMinorAt(entry) : 0;
    }

    /** Extended attributes, values as raw bytes. */
    public Map<String, byte[]> xattrs() {
      Map<String, byte[]> own = whiteout || entry < 0 || !tree.index.hasXattrsAt(entry) ? Map.of()
          : shown(tree.cachedEntry(entry).xattrs());
      if (kind != Kind.DIR || (tree.kinds[ino] & OPAQUE) == 0) {
        return own;
      }
      Map<String, byte[]> withOpaque = new LinkedHashMap<>(own);
      withOpaque.put(OPAQUE_XATTR, "y".getBytes(StandardCharsets.US_ASCII));
      return withOpaque;
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
      return kind == Kind.REG ? tree.cachedEntry(entry) : null;
    }

    /** Names of a directory's entries, in layer order. */
    public List<String> children() {
      List<String> names = new ArrayList<>();
      tree.forEachChild(this, (name, child) -> names.add(name));
      return names;
    }

    /** Hard-link count: names for a file, 2 plus subdirectories for a directory. */
    public int links() {
      return tree.links[ino];
    }

    /**
     * A path the node is shown at, relative ({@code ""} for the root), for log lines; empty for a directory the index
     * omits.
     */
    public Optional<String> path() {
      if (ino == ROOT) {
        return Optional.of("");
      }
      if (entry < 0) {
        return Optional.empty();
      }
      String name = tree.index.nameAt(entry);
      if (!whiteout) {
        return Optional.of(name);
      }
      int base = name.lastIndexOf('/') + 1;
      return Optional.of(name.substring(0, base) + name.substring(base + WHITEOUT_PREFIX.length));
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Node n && n.tree == tree && n.ino == ino;
    }

    @Override
    public int hashCode() {
      return ino;
    }

    @Override
    public String toString() {
      return "Node[" + ino + ", " + kind + "]";
    }
  }

  private static final Kind[] KINDS = Kind.values();
  private static final byte KIND_MASK = 0x7;
  private static final byte WHITEOUT = 0x8;
  private static final byte OPAQUE = 0x10;
  private static final int ROOT = 1;
  private static final byte[] WHITEOUT_PREFIX = LayerEntry.WHITEOUT_PREFIX.getBytes(StandardCharsets.US_ASCII);
  private static final byte[] OPAQUE_MARKER = LayerEntry.OPAQUE_MARKER.getBytes(StandardCharsets.US_ASCII);

  private final LayerIndex index;
  // The index's name bytes: every name the tree shows is a range of them.
  private final ByteBuffer bytes;
  // Inodes, by number (0 unused; the root is 1): kind and flags, the entry shown (-1 for an implicit directory), the
  // link count, and for a directory its first name (-1 for none).
  private byte[] kinds;
  private int[] entryOf;
  private int[] links;
  private int[] firstName;
  // Each directory's last name, while building (a new name is listed after it).
  private int[] lastName;
  private int inodes = 2;
  // Names, by number: the directory holding it, its inode, where its bytes are in the index's names (a component of
  // an entry's path), their length, the next name of the directory (-1 for none), and the name's hash.
  private int[] nameDir;
  private int[] nameNode;
  private int[] nameAt;
  private int[] nameLength;
  private int[] nameNext;
  private int[] nameHash;
  private int names;
  // Open addressing over names by (directory, name): a name's number, or -1 for a free slot.
  private int[] slots;
  private long totalBytes;
  private boolean anyXattrs;
  // Entries made for nodes, by entry number: a read's node and its neighbours' lookups reuse them.
  private final EntryCacheSlot[] entryCache = new EntryCacheSlot[4096];

  private record EntryCacheSlot(int number, LayerEntry entry) {}

  private LayerTree(LayerIndex index) {
    this.index = index;
    this.bytes = index.nameBytes();
    int n = index.entryCount() + 16;
    kinds = new byte[n];
    entryOf = new int[n];
    links = new int[n];
    firstName = new int[n];
    nameDir = new int[n];
    nameNode = new int[n];
    nameAt = new int[n];
    nameLength = new int[n];
    nameNext = new int[n];
    nameHash = new int[n];
    slots = new int[Integer.highestOneBit(Math.max(2, n * 2 - 1)) << 1];
    Arrays.fill(slots, -1);
  }

  private LayerEntry cachedEntry(int number) {
    int s = number & (entryCache.length - 1);
    EntryCacheSlot c = entryCache[s];
    if (c != null && c.number == number) {
      return c.entry;
    }
    LayerEntry e = index.entryAt(number);
    // A racy store of an immutable value: a reader sees either slot, each whole.
    entryCache[s] = new EntryCacheSlot(number, e);
    return e;
  }

  /** Builds the tree of a layer from its verified index, from the names' bytes: no string per entry. */
  public static LayerTree of(LayerIndex index) {
    LayerTree t = new LayerTree(index);
    t.inode(ROOT, Kind.DIR, -1, false);
    t.lastName = new int[t.kinds.length];
    List<Integer> deferredLinks = new ArrayList<>();
    int count = index.entryCount();
    // The directory of the entry before: a layer lists a directory's entries together, and a walk from the root per
    // entry would cost as many lookups as the path has components.
    int prevParentAt = -1;
    int prevParentLength = -1;
    int prevDir = ROOT;
    for (int i = 0; i < count; i++) {
      int at = index.nameOffsetAt(i);
      int length = index.nameLengthAt(i);
      EntryType type = index.typeAt(i);
      if (index.hasXattrsAt(i)) {
        t.anyXattrs |= !shown(index.entryAt(i).xattrs()).isEmpty();
      }
      if (length == 0) {
        // The root keeps number 1: the kernel's protocol names it so.
        if (type == EntryType.DIR) {
          t.entryOf[ROOT] = i;
        }
        continue;
      }
      if (type == EntryType.HARDLINK) {
        deferredLinks.add(i);
        continue;
      }
      int slash = t.lastSlash(at, length);
      int baseAt = slash < 0 ? at : slash + 1;
      int baseLength = at + length - baseAt;
      int dir;
      if (slash < 0) {
        dir = ROOT;
      } else if (slash - at == prevParentLength && same(t.bytes, at, t.bytes, prevParentAt, prevParentLength)) {
        dir = prevDir;
      } else {
        dir = t.ensureDir(t.bytes, at, slash - at);
        prevParentAt = at;
        prevParentLength = slash - at;
        prevDir = dir;
      }
      if (dir < 0) {
        continue; // under a path shown as something else: not shown, as overlayfs could not show it either
      }
      if (t.kindOf(dir) != Kind.DIR) {
        continue;
      }
      if (baseLength == OPAQUE_MARKER.length && t.startsWith(baseAt, baseLength, OPAQUE_MARKER)) {
        t.kinds[dir] |= OPAQUE;
        t.anyXattrs = true;
        continue;
      }
      if (baseLength > WHITEOUT_PREFIX.length && t.startsWith(baseAt, baseLength, WHITEOUT_PREFIX)) {
        int ino = t.newInode(Kind.CHAR, i, true);
        t.name(dir, t.bytes, baseAt + WHITEOUT_PREFIX.length, baseLength - WHITEOUT_PREFIX.length, ino);
        continue;
      }
      Kind kind = switch (type) {
        case DIR -> Kind.DIR;
        case REG -> Kind.REG;
        case SYMLINK -> Kind.SYMLINK;
        case CHAR -> Kind.CHAR;
        case BLOCK -> Kind.BLOCK;
        case FIFO -> Kind.FIFO;
        case HARDLINK -> throw new IllegalStateException("handled above");
      };
      int existing = t.findName(dir, t.bytes, baseAt, baseLength);
      if (kind == Kind.DIR && existing >= 0 && t.kindOf(t.nameNode[existing]) == Kind.DIR) {
        // A directory listed after its children (or twice): keep the children, take the attributes.
        t.entryOf[t.nameNode[existing]] = i;
        continue;
      }
      int ino = t.newInode(kind, i, false);
      t.name(dir, t.bytes, baseAt, baseLength, ino);
    }
    for (int i : deferredLinks) {
      int target = t.resolve(ByteBuffer.wrap(index.linkNameAt(i).getBytes(StandardCharsets.UTF_8)));
      if (target < 0 || t.kindOf(target) == Kind.DIR) {
        continue;
      }
      int at = index.nameOffsetAt(i);
      int length = index.nameLengthAt(i);
      int slash = t.lastSlash(at, length);
      int dir = slash < 0 ? ROOT : t.ensureDir(t.bytes, at, slash - at);
      if (dir < 0 || t.kindOf(dir) != Kind.DIR) {
        continue;
      }
      t.links[target]++;
      int baseAt = slash < 0 ? at : slash + 1;
      t.name(dir, t.bytes, baseAt, at + length - baseAt, target);
    }
    t.countSubdirectories();
    t.lastName = null;
    t.totalBytes = index.contentSize();
    return t;
  }

  private int lastSlash(int at, int length) {
    for (int k = at + length - 1; k >= at; k--) {
      if (bytes.get(k) == '/') {
        return k;
      }
    }
    return -1;
  }

  private boolean startsWith(int at, int length, byte[] prefix) {
    if (length < prefix.length) {
      return false;
    }
    for (int k = 0; k < prefix.length; k++) {
      if (bytes.get(at + k) != prefix[k]) {
        return false;
      }
    }
    return true;
  }

  private static boolean same(ByteBuffer a, int aAt, ByteBuffer b, int bAt, int length) {
    for (int k = 0; k < length; k++) {
      if (a.get(aAt + k) != b.get(bAt + k)) {
        return false;
      }
    }
    return true;
  }

  private Kind kindOf(int ino) {
    return KINDS[kinds[ino] & KIND_MASK];
  }

  private void inode(int ino, Kind kind, int entry, boolean whiteout) {
    kinds[ino] = (byte) (kind.ordinal() | (whiteout ? WHITEOUT : 0));
    entryOf[ino] = entry;
    links[ino] = 1;
    firstName[ino] = -1;
  }

  private int newInode(Kind kind, int entry, boolean whiteout) {
    if (inodes == kinds.length) {
      int n = kinds.length + (kinds.length >> 1) + 16;
      kinds = Arrays.copyOf(kinds, n);
      entryOf = Arrays.copyOf(entryOf, n);
      links = Arrays.copyOf(links, n);
      firstName = Arrays.copyOf(firstName, n);
      lastName = Arrays.copyOf(lastName, n);
    }
    int ino = inodes++;
    inode(ino, kind, entry, whiteout);
    return ino;
  }

  /** The hash of a name's bytes with its directory's number. */
  private static int hash(int dir, ByteBuffer b, int at, int length) {
    int h = 0;
    for (int k = at; k < at + length; k++) {
      h = 31 * h + b.get(k);
    }
    h = h * 0x9E3779B1 + dir;
    return h ^ (h >>> 16);
  }

  /** The name {@code b[at, at + length)} in directory {@code dir}, or -1. */
  private int findName(int dir, ByteBuffer b, int at, int length) {
    int h = hash(dir, b, at, length);
    int mask = slots.length - 1;
    for (int i = h & mask; ; i = (i + 1) & mask) {
      int n = slots[i];
      if (n < 0) {
        return -1;
      }
      if (nameHash[n] == h && nameDir[n] == dir && nameLength[n] == length && same(bytes, nameAt[n], b, at, length)) {
        return n;
      }
    }
  }

  /**
   * Shows {@code ino} as the name {@code bytes[at, at + length)} in {@code dir}: a name shown already now shows it in
   * the same place of the listing, a new one is listed last.
   */
  private void name(int dir, ByteBuffer b, int at, int length, int ino) {
    int existing = findName(dir, b, at, length);
    if (existing >= 0) {
      nameNode[existing] = ino;
      return;
    }
    if (names == nameDir.length) {
      int n = nameDir.length + (nameDir.length >> 1) + 16;
      nameDir = Arrays.copyOf(nameDir, n);
      nameNode = Arrays.copyOf(nameNode, n);
      nameAt = Arrays.copyOf(nameAt, n);
      nameLength = Arrays.copyOf(nameLength, n);
      nameNext = Arrays.copyOf(nameNext, n);
      nameHash = Arrays.copyOf(nameHash, n);
    }
    if ((names + 1) * 2L > slots.length) {
      rehash(slots.length * 2);
    }
    int n = names++;
    nameDir[n] = dir;
    nameNode[n] = ino;
    nameAt[n] = at;
    nameLength[n] = length;
    nameNext[n] = -1;
    nameHash[n] = hash(dir, b, at, length);
    place(n);
    if (firstName[dir] < 0) {
      firstName[dir] = n;
    } else {
      nameNext[lastName[dir]] = n;
    }
    lastName[dir] = n;
  }

  private void place(int n) {
    int mask = slots.length - 1;
    int i = nameHash[n] & mask;
    while (slots[i] >= 0) {
      i = (i + 1) & mask;
    }
    slots[i] = n;
  }

  private void rehash(int size) {
    slots = new int[size];
    Arrays.fill(slots, -1);
    for (int n = 0; n < names; n++) {
      place(n);
    }
  }

  /**
   * The directory at the path {@code bytes[at, at + length)}, made (with every missing parent) a plain directory when
   * the index has none, named by the path's own bytes; -1 when a path on the way is shown as something else. A loop,
   * not a recursion: a layer may legally hold a path thousands of directories deep, and the stack must not depend on
   * it.
   */
  private int ensureDir(ByteBuffer b, int at, int length) {
    int dir = ROOT;
    int from = at;
    int end = at + length;
    while (from < end) {
      int slash = from;
      while (slash < end && b.get(slash) != '/') {
        slash++;
      }
      if (slash > from) {
        int n = findName(dir, b, from, slash - from);
        if (n < 0) {
          int d = newInode(Kind.DIR, -1, false);
          name(dir, b, from, slash - from, d);
          dir = d;
        } else if (kindOf(nameNode[n]) == Kind.DIR) {
          dir = nameNode[n];
        } else {
          return -1; // a file, link or whiteout has this name: nothing below it is shown
        }
      }
      from = slash + 1;
    }
    return dir;
  }

  private void countSubdirectories() {
    for (int ino = 1; ino < inodes; ino++) {
      if (kindOf(ino) == Kind.DIR) {
        links[ino] = 2;
      }
    }
    for (int n = 0; n < names; n++) {
      if (kindOf(nameNode[n]) == Kind.DIR) {
        links[nameDir[n]]++;
      }
    }
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

  /** The inode at the relative path in {@code path} (empty for the root; leading and doubled slashes ignored), or -1. */
  private int resolve(ByteBuffer path) {
    int ino = ROOT;
    int from = 0;
    int end = path.limit();
    while (from < end) {
      int slash = from;
      while (slash < end && path.get(slash) != '/') {
        slash++;
      }
      if (slash > from) {
        if (kindOf(ino) != Kind.DIR) {
          return -1;
        }
        int n = findName(ino, path, from, slash - from);
        if (n < 0) {
          return -1;
        }
        ino = nameNode[n];
      }
      from = slash + 1;
    }
    return ino;
  }

  /** The node at a FUSE path ({@code /}, {@code /usr/bin}). */
  public Optional<Node> lookup(String fusePath) {
    int ino = resolve(ByteBuffer.wrap(fusePath.getBytes(StandardCharsets.UTF_8)));
    return ino > 0 ? Optional.of(new Node(this, ino)) : Optional.empty();
  }

  /** The node numbered {@code ino} ({@link Node#ino}; the root is 1), if the tree shows one. */
  public Optional<Node> node(long ino) {
    return ino > 0 && ino < inodes ? Optional.of(new Node(this, (int) ino)) : Optional.empty();
  }

  /** The entry {@code name} of directory {@code dir}, if it has one. */
  public Optional<Node> child(Node dir, String name) {
    if (dir.kind != Kind.DIR || name.isEmpty() || name.indexOf('/') >= 0) {
      return Optional.empty();
    }
    byte[] utf8 = name.getBytes(StandardCharsets.UTF_8);
    int n = findName(dir.ino, ByteBuffer.wrap(utf8), 0, utf8.length);
    return n < 0 ? Optional.empty() : Optional.of(new Node(this, nameNode[n]));
  }

  /** A directory's entries, in layer order, with their names. */
  public void forEachChild(Node dir, java.util.function.BiPredicate<String, Node> visit) {
    if (dir.kind != Kind.DIR) {
      return;
    }
    for (int n = firstName[dir.ino]; n >= 0; n = nameNext[n]) {
      if (!visit.test(nameOf(n), new Node(this, nameNode[n]))) {
        return;
      }
    }
  }

  private String nameOf(int n) {
    byte[] utf8 = new byte[nameLength[n]];
    bytes.get(nameAt[n], utf8);
    return new String(utf8, StandardCharsets.UTF_8);
  }

  /** Number of paths (hard links count once per name), the root's included. */
  public int size() {
    return names + 1;
  }

  /** Sum of regular file sizes, for statfs. */
  public long totalBytes() {
    return totalBytes;
  }
}
