package dev.flatpull.fetcher.layer;

import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.AbstractList;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.RandomAccess;

/**
 * A layer's entries as flat records, with no Java object per entry: fixed-size entry and chunk records, an
 * open-addressing table of the entries by name, the entries' names, and one area for the rest of what varies in
 * length (digests, owners, link targets, extended attributes; owners and the names of users, groups and attributes
 * stored once, a file's digest shared with its single chunk's). A {@link LayerEntry} is made when asked for and
 * dropped by its caller. The sections are on the heap when the index was just parsed from a TOC (written by a
 * {@link Builder} as the TOC is read, with no entry kept), or slices of a read-only map of the node's kept index file
 * ({@link LayerIndexFile}), used in place: a later mount of the layer reads nothing but the pages its lookups touch
 * (docs/benchmarks.md, index memory). Immutable, so thread-safe; only absolute reads of the buffers are made.
 *
 * <p>Layout, little-endian, as the file holds it: a {@value #HEAD}-byte head of counts, section lengths and the files'
 * total size, then the sections, each from a multiple of 8: per entry in layer order, a {@value #NAME}-byte record of
 * what a tree and a lookup by name read (the name, its hash, the type, whether it has extended attributes); per entry,
 * the {@value #REC}-byte record of the rest; the chunk records ({@value #CH} bytes each, every file's in file order);
 * the name table ({@code int} entry numbers, -1 for a free slot, a power of two above the entries); the variable area,
 * addressed by offsets into it (-1 for none); and the entries' names, apart. A mount of a kept file thus touches the
 * name records and the names, about a third of the file; the rest is read where a file is opened or read.
 */
final class EntryTable {
  static final int HEAD = 48;
  private static final int H_COUNT = 0;
  private static final int H_CHUNKS = 4;
  private static final int H_SLOTS = 8;
  private static final int H_AREA_LENGTH = 12;
  private static final int H_PATHS_LENGTH = 16;
  private static final int H_CONTENT_SIZE = 24;

  // What a mount's tree and a lookup by name read of every entry, apart from the rest (see the class comment).
  static final int NAME = 12;
  private static final int N_NAME = 0;
  private static final int N_HASH = 4;
  private static final int N_TYPE = 8;
  private static final int N_FLAGS = 9;
  private static final byte XATTRS = 1;

  static final int REC = 48;
  private static final int R_MODE = 0;
  private static final int R_OWNER = 4;
  private static final int R_SIZE = 8;
  private static final int R_MTIME_SECONDS = 16;
  private static final int R_MTIME_NANOS = 24;
  private static final int R_LINK = 28;
  private static final int R_DIGEST = 32;
  private static final int R_EXTRA = 36;
  private static final int R_FIRST_CHUNK = 40;
  private static final int R_CHUNK_COUNT = 44;

  static final int CH = 44;
  private static final int C_FILE_OFFSET = 0;
  private static final int C_SIZE = 8;
  private static final int C_STORED_OFFSET = 16;
  private static final int C_STORED_LENGTH = 24;
  private static final int C_INNER_OFFSET = 32;
  private static final int C_DIGEST = 40;

  private static final EntryType[] TYPES = EntryType.values();

  private final int count;
  private final int chunkCount;
  private final int slotCount;
  private final long contentSize;
  private final ByteBuffer names;
  private final ByteBuffer records;
  private final ByteBuffer chunks;
  private final ByteBuffer slots;
  private final ByteBuffer area;
  // The entries' names (paths), apart from the rest of the area: a mount's tree reads every one of them and nothing
  // else there.
  private final ByteBuffer paths;

  private EntryTable(int count, int chunkCount, int slotCount, long contentSize, ByteBuffer names, ByteBuffer records,
      ByteBuffer chunks, ByteBuffer slots, ByteBuffer area, ByteBuffer paths) {
    this.count = count;
    this.chunkCount = chunkCount;
    this.slotCount = slotCount;
    this.contentSize = contentSize;
    this.names = names.order(ByteOrder.LITTLE_ENDIAN);
    this.records = records.order(ByteOrder.LITTLE_ENDIAN);
    this.chunks = chunks.order(ByteOrder.LITTLE_ENDIAN);
    this.slots = slots.order(ByteOrder.LITTLE_ENDIAN);
    this.area = area.order(ByteOrder.LITTLE_ENDIAN);
    this.paths = paths.order(ByteOrder.LITTLE_ENDIAN);
  }

  private static int padded(long length) {
    return (int) ((length + 7) & ~7L);
  }

  /**
   * The table in {@code b} (a kept file's, from its head on), its head checked: counts and section lengths that add up
   * to the buffer. The records are not read here, so that opening a layer touches none of its pages: the file's
   * checksum stands for their soundness, and a reference outside a section would fail the one read that follows it
   * ({@link IndexOutOfBoundsException}).
   *
   * @throws IllegalArgumentException saying what does not fit
   */
  static EntryTable wrap(ByteBuffer b) {
    b.order(ByteOrder.LITTLE_ENDIAN);
    require(b.limit() >= HEAD, "an entry table of " + b.limit() + " bytes");
    int count = b.getInt(H_COUNT);
    int chunkCount = b.getInt(H_CHUNKS);
    int slotCount = b.getInt(H_SLOTS);
    int areaLength = b.getInt(H_AREA_LENGTH);
    int pathsLength = b.getInt(H_PATHS_LENGTH);
    require(count >= 0 && chunkCount >= 0 && slotCount >= 0 && areaLength >= 0 && pathsLength >= 0,
        "negative counts");
    require(slotCount >= 2 && Integer.bitCount(slotCount) == 1 && slotCount > count, "a name table of " + slotCount);
    long[] lengths = {(long) count * NAME, (long) count * REC, (long) chunkCount * CH, (long) slotCount * 4, areaLength,
        pathsLength};
    long total = HEAD;
    for (long l : lengths) {
      total += padded(l);
    }
    require(total == b.limit(), "sections of " + total + " bytes in " + b.limit());
    ByteBuffer[] sections = new ByteBuffer[lengths.length];
    int at = HEAD;
    for (int k = 0; k < lengths.length; k++) {
      sections[k] = b.slice(at, (int) lengths[k]);
      at += padded(lengths[k]);
    }
    return new EntryTable(count, chunkCount, slotCount, b.getLong(H_CONTENT_SIZE), sections[0], sections[1],
        sections[2], sections[3], sections[4], sections[5]);
  }

  private static void require(boolean ok, String what) {
    if (!ok) {
      throw new IllegalArgumentException(what);
    }
  }

  /** The table as the kept index file holds it: the head, then each section, padded to a multiple of 8. */
  List<ByteBuffer> bytes() {
    ByteBuffer head = ByteBuffer.allocate(HEAD).order(ByteOrder.LITTLE_ENDIAN).putInt(H_COUNT, count)
        .putInt(H_CHUNKS, chunkCount).putInt(H_SLOTS, slotCount).putInt(H_AREA_LENGTH, area.limit()).putInt(H_PATHS_LENGTH, paths.limit())
        .putLong(H_CONTENT_SIZE, contentSize);
    List<ByteBuffer> out = new ArrayList<>(List.of(head));
    for (ByteBuffer section : List.of(names, records, chunks, slots, area, paths)) {
      out.add(section.duplicate().clear());
      int pad = padded(section.limit()) - section.limit();
      if (pad > 0) {
        out.add(ByteBuffer.allocate(pad));
      }
    }
    return out;
  }

  /**
   * The first {@code length} bytes of {@code b}: a copy when more than an eighth of it is unused (a section grows by
   * half or doubles as it is written, and the table keeps it for as long as the layer is mounted).
   */
  private static ByteBuffer used(ByteBuffer b, int length) {
    if (b.capacity() - length > b.capacity() / 8) {
      return ByteBuffer.wrap(Arrays.copyOf(b.array(), length));
    }
    return b.slice(0, length);
  }

  /** The table of {@code entries} (a name listed twice: the later entry replaces the earlier one, in its place). */
  static EntryTable of(List<LayerEntry> entries) throws LayerFormatException {
    Builder b = new Builder(entries.size());
    for (LayerEntry e : entries) {
      b.add(e);
    }
    return b.build();
  }

  /**
   * Writes a table entry by entry, as a TOC is read: no entry is kept. A name added again replaces the entry of that
   * name in its place (its chunks are dropped when the table is built). Not thread-safe.
   */
  static final class Builder {
    private ByteBuffer names;
    private ByteBuffer records;
    private ByteBuffer chunks;
    private int[] slots;
    private int count;
    private int chunkCount;
    private int replacedChunks;
    private final Area area = new Area();
    private final Area paths = new Area();

    /** @param expected the entries expected (a first pass counted them), to size the sections once */
    Builder(int expected) {
      int n = Math.max(16, expected);
      names = ByteBuffer.allocate(n * NAME).order(ByteOrder.LITTLE_ENDIAN);
      records = ByteBuffer.allocate(n * REC).order(ByteOrder.LITTLE_ENDIAN);
      chunks = ByteBuffer.allocate(n * CH).order(ByteOrder.LITTLE_ENDIAN);
      slots = new int[Integer.highestOneBit(n) << 2];
      Arrays.fill(slots, -1);
    }

    private static ByteBuffer grown(ByteBuffer b, long need) throws LayerFormatException {
      if (need <= b.capacity()) {
        return b;
      }
      long size = Math.max(need, b.capacity() + (b.capacity() >> 1));
      if (size > Integer.MAX_VALUE - 64) {
        if (need > Integer.MAX_VALUE - 64) {
          throw new LayerFormatException("a layer index section of " + need + " bytes, more than one table holds");
        }
        size = Integer.MAX_VALUE - 64;
      }
      return ByteBuffer.allocate((int) size).order(ByteOrder.LITTLE_ENDIAN).put(b.array(), 0, b.capacity()).clear();
    }

    /** The number of the entry {@code name} names so far, or -1. */
    int find(String name) {
      return find(name.hashCode(), name.getBytes(StandardCharsets.UTF_8));
    }

    private int find(int hash, byte[] utf8) {
      int mask = slots.length - 1;
      for (int s = spread(hash) & mask; ; s = (s + 1) & mask) {
        int i = slots[s];
        if (i < 0 || (names.getInt(i * NAME + N_HASH) == hash && paths.equals(names.getInt(i * NAME + N_NAME), utf8))) {
          return i;
        }
      }
    }

    /** The type of entry {@code i}. */
    EntryType type(int i) {
      return TYPES[names.get(i * NAME + N_TYPE)];
    }

    /** The name of entry {@code i}. */
    String name(int i) {
      return paths.string(names.getInt(i * NAME + N_NAME));
    }

    /** Adds {@code e}, or replaces the entry of its name; returns its number. */
    int add(LayerEntry e) throws LayerFormatException {
      byte[] utf8 = e.name().getBytes(StandardCharsets.UTF_8);
      int hash = e.name().hashCode();
      int i = find(hash, utf8);
      int nameRef;
      if (i >= 0) {
        nameRef = names.getInt(i * NAME + N_NAME);
        replacedChunks += records.getInt(i * REC + R_CHUNK_COUNT);
      } else {
        i = count++;
        names = grown(names, (long) count * NAME);
        records = grown(records, (long) count * REC);
        nameRef = paths.bytes(utf8);
        if (count * 2L > slots.length) {
          rehash(slots.length * 2);
        }
        place(hash, i);
      }
      int n = i * NAME;
      names.putInt(n + N_NAME, nameRef).putInt(n + N_HASH, hash).put(n + N_TYPE, (byte) e.type().ordinal())
          .put(n + N_FLAGS, e.xattrs().isEmpty() ? 0 : XATTRS);
      int r = i * REC;
      records.putShort(r + R_MODE, (short) e.mode()).putInt(r + R_OWNER, area.owner(e)).putLong(r + R_SIZE, e.size())
          .putLong(r + R_MTIME_SECONDS, e.modTime().getEpochSecond()).putInt(r + R_MTIME_NANOS, e.modTime().getNano())
          .putInt(r + R_LINK, e.linkName() == null ? -1 : area.string(e.linkName(), false))
          .putInt(r + R_EXTRA, area.extra(e))
          .putInt(r + R_FIRST_CHUNK, chunkCount).putInt(r + R_CHUNK_COUNT, e.chunks().size());
      chunks = grown(chunks, ((long) chunkCount + e.chunks().size()) * CH);
      Digest whole = e.digest().orElse(null);
      int wholeRef = -1;
      for (LayerChunk ch : e.chunks()) {
        int o = chunkCount++ * CH;
        int ref = ch.digest() == null ? -1 : area.digest(ch.digest());
        if (whole != null && wholeRef < 0 && whole.equals(ch.digest())) {
          wholeRef = ref; // a file of one chunk: its digest is its chunk's, stored once
        }
        chunks.putLong(o + C_FILE_OFFSET, ch.fileOffset()).putLong(o + C_SIZE, ch.size())
            .putLong(o + C_STORED_OFFSET, ch.storedOffset()).putLong(o + C_STORED_LENGTH, ch.storedLength())
            .putLong(o + C_INNER_OFFSET, ch.innerOffset()).putInt(o + C_DIGEST, ref);
      }
      records.putInt(r + R_DIGEST, whole == null ? -1 : wholeRef >= 0 ? wholeRef : area.digest(whole));
      return i;
    }

    private void place(int hash, int i) {
      int mask = slots.length - 1;
      int s = spread(hash) & mask;
      while (slots[s] >= 0) {
        s = (s + 1) & mask;
      }
      slots[s] = i;
    }

    private void rehash(int size) {
      slots = new int[size];
      Arrays.fill(slots, -1);
      for (int i = 0; i < count; i++) {
        place(names.getInt(i * NAME + N_HASH), i);
      }
    }

    /** The table; the builder is not used after. */
    EntryTable build() throws LayerFormatException {
      if (replacedChunks > 0) {
        // Replaced entries' chunks are dropped: every file's chunks stay together, in entry order.
        ByteBuffer kept = ByteBuffer.allocate((chunkCount - replacedChunks) * CH).order(ByteOrder.LITTLE_ENDIAN);
        int c = 0;
        for (int i = 0; i < count; i++) {
          int first = records.getInt(i * REC + R_FIRST_CHUNK);
          int n = records.getInt(i * REC + R_CHUNK_COUNT);
          kept.put(c * CH, chunks, first * CH, n * CH);
          records.putInt(i * REC + R_FIRST_CHUNK, c);
          c += n;
        }
        chunks = kept;
        chunkCount = c;
        replacedChunks = 0;
      }
      long contentSize = 0;
      for (int i = 0; i < count; i++) {
        if (type(i) == EntryType.REG) {
          contentSize += records.getLong(i * REC + R_SIZE);
        }
      }
      ByteBuffer table = ByteBuffer.allocate(slots.length * 4).order(ByteOrder.LITTLE_ENDIAN);
      table.asIntBuffer().put(slots);
      return new EntryTable(count, chunkCount, slots.length, contentSize, used(names, count * NAME),
          used(records, count * REC), used(chunks, chunkCount * CH), table,
          area.trimmed(), paths.trimmed());
    }
  }

  /** The variable-length area as it is written. */
  private static final class Area {
    byte[] bytes = new byte[1 << 16];
    int length;
    // Only what repeats is shared: user and group names, attribute keys, owners.
    private final Map<String, Integer> shared = new HashMap<>();
    private final Map<List<Object>, Integer> owners = new HashMap<>();

    private void ensure(int more) {
      if ((long) length + more > Integer.MAX_VALUE - 64) {
        throw new IllegalStateException("a layer index's strings exceed 2 GiB");
      }
      if (length + more > bytes.length) {
        bytes = Arrays.copyOf(bytes, (int) Math.min(Integer.MAX_VALUE - 64, Math.max(length + more,
            (long) bytes.length * 2)));
      }
    }

    private void putInt(int v) {
      ensure(4);
      bytes[length] = (byte) v;
      bytes[length + 1] = (byte) (v >>> 8);
      bytes[length + 2] = (byte) (v >>> 16);
      bytes[length + 3] = (byte) (v >>> 24);
      length += 4;
    }

    private void put(byte[] b) {
      ensure(b.length);
      System.arraycopy(b, 0, bytes, length, b.length);
      length += b.length;
    }

    int string(String s, boolean share) {
      if (share) {
        Integer at = shared.get(s);
        if (at != null) {
          return at;
        }
      }
      int at = bytes(s.getBytes(StandardCharsets.UTF_8));
      if (share) {
        shared.put(s, at);
      }
      return at;
    }

    /** What was written, as a buffer ({@link #used}); the area is not written after. */
    ByteBuffer trimmed() {
      ByteBuffer out = used(ByteBuffer.wrap(bytes), length);
      bytes = null;
      return out;
    }

    /** A string given as its UTF-8 bytes, not shared. */
    int bytes(byte[] utf8) {
      int at = length;
      putInt(utf8.length);
      put(utf8);
      return at;
    }

    /** Whether the string at {@code ref} is {@code utf8}. */
    boolean equals(int ref, byte[] utf8) {
      int n = (bytes[ref] & 0xff) | (bytes[ref + 1] & 0xff) << 8 | (bytes[ref + 2] & 0xff) << 16
          | (bytes[ref + 3] & 0xff) << 24;
      return n == utf8.length && Arrays.equals(bytes, ref + 4, ref + 4 + n, utf8, 0, n);
    }

    /** The string at {@code ref}. */
    String string(int ref) {
      return EntryTable.string(ByteBuffer.wrap(bytes, 0, length).order(ByteOrder.LITTLE_ENDIAN), ref);
    }

    /**
     * A digest, stored where it is written: chunk digests are nearly all distinct, and a map of them all cost more
     * than the few shared ones (a file's single chunk shares its file's, see add).
     */
    int digest(Digest d) {
      int at = length;
      ensure(1);
      bytes[length++] = (byte) (d.algorithm().equals("sha256") ? 1 : 2);
      put(d.raw());
      return at;
    }

    // The owner written last: a layer's entries come in runs of one owner, and a map lookup per entry is the
    // table's largest cost while a TOC is parsed.
    private LayerEntry lastOwned;
    private int lastOwner = -1;

    int owner(LayerEntry e) {
      LayerEntry last = lastOwned;
      if (last != null && last.uid() == e.uid() && last.gid() == e.gid()
          && java.util.Objects.equals(last.userName(), e.userName())
          && java.util.Objects.equals(last.groupName(), e.groupName())) {
        return lastOwner;
      }
      List<Object> key = Arrays.asList(e.uid(), e.gid(), e.userName(), e.groupName());
      Integer known = owners.get(key);
      if (known == null) {
        int user = e.userName() == null ? -1 : string(e.userName(), true);
        int group = e.groupName() == null ? -1 : string(e.groupName(), true);
        known = length;
        putInt(e.uid());
        putInt(e.gid());
        putInt(user);
        putInt(group);
        owners.put(key, known);
      }
      lastOwned = e;
      lastOwner = known;
      return known;
    }

    /** Device numbers and extended attributes, which nearly no entry has: -1 then. */
    int extra(LayerEntry e) {
      if (e.devMajor() == 0 && e.devMinor() == 0 && e.xattrs().isEmpty()) {
        return -1;
      }
      int[] keys = new int[e.xattrs().size()];
      int k = 0;
      for (String key : e.xattrs().keySet()) {
        keys[k++] = string(key, true);
      }
      int at = length;
      putInt(e.devMajor());
      putInt(e.devMinor());
      putInt(keys.length);
      k = 0;
      for (byte[] value : e.xattrs().values()) {
        putInt(keys[k++]);
        putInt(value.length);
        put(value);
      }
      return at;
    }
  }

  private static int spread(int h) {
    return h ^ (h >>> 16);
  }

  int size() {
    return count;
  }

  int chunkCount() {
    return chunkCount;
  }

  EntryType type(int i) {
    return TYPES[names.get(i * NAME + N_TYPE)];
  }

  /** The sum of the regular files' sizes. */
  long contentSize() {
    return contentSize;
  }

  long size(int i) {
    return records.getLong(i * REC + R_SIZE);
  }

  /** The entry numbered {@code i} (layer order), made for the caller. */
  LayerEntry entry(int i) {
    int r = i * REC;
    int owner = records.getInt(r + R_OWNER);
    int extra = records.getInt(r + R_EXTRA);
    int devMajor = 0;
    int devMinor = 0;
    Map<String, byte[]> xattrs = Map.of();
    if (extra >= 0) {
      devMajor = area.getInt(extra);
      devMinor = area.getInt(extra + 4);
      int n = area.getInt(extra + 8);
      int x = extra + 12;
      if (n > 0) {
        xattrs = new LinkedHashMap<>();
        for (int k = 0; k < n; k++) {
          String key = string(area, area.getInt(x));
          byte[] value = new byte[area.getInt(x + 4)];
          area.get(x + 8, value);
          xattrs.put(key, value);
          x += 8 + value.length;
        }
      }
    }
    int first = records.getInt(r + R_FIRST_CHUNK);
    int n = records.getInt(r + R_CHUNK_COUNT);
    List<LayerChunk> chunkList = n == 0 ? List.of() : new ChunkList(first, n);
    return new LayerEntry(name(i), type(i), records.getLong(r + R_SIZE), records.getShort(r + R_MODE) & 0xffff,
        area.getInt(owner), area.getInt(owner + 4), string(area, area.getInt(owner + 8)),
        string(area, area.getInt(owner + 12)),
        Instant.ofEpochSecond(records.getLong(r + R_MTIME_SECONDS), records.getInt(r + R_MTIME_NANOS)),
        string(area, records.getInt(r + R_LINK)), devMajor, devMinor, xattrs,
        Optional.ofNullable(digest(records.getInt(r + R_DIGEST))), chunkList);
  }

  /** Permission bits of entry {@code i}, with setuid, setgid and sticky. */
  int mode(int i) {
    return records.getShort(i * REC + R_MODE) & 0xffff;
  }

  int uid(int i) {
    return area.getInt(records.getInt(i * REC + R_OWNER));
  }

  int gid(int i) {
    return area.getInt(records.getInt(i * REC + R_OWNER) + 4);
  }

  long modSeconds(int i) {
    return records.getLong(i * REC + R_MTIME_SECONDS);
  }

  int modNanos(int i) {
    return records.getInt(i * REC + R_MTIME_NANOS);
  }

  /** A device's major number (0 without one). */
  int devMajor(int i) {
    int extra = records.getInt(i * REC + R_EXTRA);
    return extra < 0 ? 0 : area.getInt(extra);
  }

  /** A device's minor number (0 without one). */
  int devMinor(int i) {
    int extra = records.getInt(i * REC + R_EXTRA);
    return extra < 0 ? 0 : area.getInt(extra + 4);
  }

  /** A hard link's target or a symlink's, without making the entry; null for other types. */
  String linkName(int i) {
    return string(area, records.getInt(i * REC + R_LINK));
  }

  /** Whether entry {@code i} has extended attributes. */
  boolean hasXattrs(int i) {
    return (names.get(i * NAME + N_FLAGS) & XATTRS) != 0;
  }

  /** The entries' names ({@link #nameOffset}). */
  ByteBuffer nameBytes() {
    return paths.duplicate().order(ByteOrder.LITTLE_ENDIAN);
  }

  /** Where entry {@code i}'s name (UTF-8) starts in {@link #nameBytes}. */
  int nameOffset(int i) {
    return names.getInt(i * NAME + N_NAME) + 4;
  }

  /** The length in bytes of entry {@code i}'s name. */
  int nameLength(int i) {
    return paths.getInt(names.getInt(i * NAME + N_NAME));
  }

  /** The number of chunks of entry {@code i}. */
  int chunkCount(int i) {
    return records.getInt(i * REC + R_CHUNK_COUNT);
  }

  /** The name of entry {@code i}. */
  String name(int i) {
    return string(paths, names.getInt(i * NAME + N_NAME));
  }

  private static String string(ByteBuffer area, int ref) {
    if (ref < 0) {
      return null;
    }
    byte[] utf8 = new byte[area.getInt(ref)];
    area.get(ref + 4, utf8);
    return new String(utf8, StandardCharsets.UTF_8);
  }

  private Digest digest(int ref) {
    if (ref < 0) {
      return null;
    }
    byte[] raw = new byte[area.get(ref) == 1 ? 32 : 64];
    area.get(ref + 1, raw);
    return Digest.ofRaw(raw.length == 32 ? "sha256" : "sha512", raw);
  }

  private LayerChunk chunk(int c) {
    int o = c * CH;
    return new LayerChunk(chunks.getLong(o + C_FILE_OFFSET), chunks.getLong(o + C_SIZE),
        new ByteRange(chunks.getLong(o + C_STORED_OFFSET), chunks.getLong(o + C_STORED_LENGTH)),
        chunks.getLong(o + C_INNER_OFFSET), digest(chunks.getInt(o + C_DIGEST)));
  }

  /** One file's chunks, made as they are asked for (List.copyOf in LayerEntry copies them once). */
  private final class ChunkList extends AbstractList<LayerChunk> implements RandomAccess {
    private final int first;
    private final int n;

    ChunkList(int first, int n) {
      this.first = first;
      this.n = n;
    }

    @Override
    public LayerChunk get(int i) {
      return chunk(first + java.util.Objects.checkIndex(i, n));
    }

    @Override
    public int size() {
      return n;
    }
  }

  // The stored chunks' numbers in blob order, made on first use (see chunksStoredIn).
  private volatile int[] blobOrder;

  private long storedOffset(int c) {
    return chunks.getLong(c * CH + C_STORED_OFFSET);
  }

  private long storedLength(int c) {
    return chunks.getLong(c * CH + C_STORED_LENGTH);
  }

  private int[] blobOrder() {
    int[] order = blobOrder;
    if (order != null) {
      return order;
    }
    int n = 0;
    for (int c = 0; c < chunkCount; c++) {
      if (storedLength(c) > 0) {
        n++;
      }
    }
    order = new int[n];
    boolean sorted = true;
    n = 0;
    for (int c = 0; c < chunkCount; c++) {
      if (storedLength(c) > 0) {
        sorted &= n == 0 || storedOffset(order[n - 1]) <= storedOffset(c);
        order[n++] = c;
      }
    }
    if (!sorted) {
      // Layers list chunks in blob order, as they were written; a TOC that does not is sorted once, boxed.
      Integer[] boxed = Arrays.stream(order).boxed().toArray(Integer[]::new);
      Arrays.sort(boxed, java.util.Comparator.comparingLong(this::storedOffset));
      order = Arrays.stream(boxed).mapToInt(Integer::intValue).toArray();
    }
    blobOrder = order;
    return order;
  }

  /** Whether {@code test} holds for the digest of any chunk with stored bytes; no entry or chunk is made. */
  boolean anyStoredChunk(java.util.function.Predicate<Digest> test) {
    for (int c = 0; c < chunkCount; c++) {
      int ref = chunks.getInt(c * CH + C_DIGEST);
      if (storedLength(c) > 0 && ref >= 0 && test.test(digest(ref))) {
        return true;
      }
    }
    return false;
  }

  /**
   * The numbers of the entries holding a chunk whose digest is one of {@code digests}, in layer order. A chunk whose
   * digest's first eight bytes are none of theirs is passed over without making its digest, so that looking for a few
   * thousand digests among a layer's tens of thousands of chunks (borrowing another version's runtime image, inside a
   * cold start) makes nothing per chunk.
   */
  int[] entriesHoldingAny(java.util.Set<Digest> digests) {
    long[] prefixes = digests.stream().mapToLong(d -> ByteBuffer.wrap(d.raw()).order(ByteOrder.LITTLE_ENDIAN)
        .getLong(0)).sorted().distinct().toArray();
    int[] out = new int[16];
    int found = 0;
    for (int i = 0; i < count && prefixes.length > 0; i++) {
      int first = records.getInt(i * REC + R_FIRST_CHUNK);
      int n = records.getInt(i * REC + R_CHUNK_COUNT);
      for (int c = first; c < first + n; c++) {
        int ref = chunks.getInt(c * CH + C_DIGEST);
        // A digest in the area is its algorithm's byte, then its raw bytes (see digest).
        if (ref >= 0 && Arrays.binarySearch(prefixes, area.getLong(ref + 1)) >= 0 && digests.contains(digest(ref))) {
          if (found == out.length) {
            out = Arrays.copyOf(out, found * 2);
          }
          out[found++] = i;
          break;
        }
      }
    }
    return Arrays.copyOf(out, found);
  }

  /** The chunks stored in the blob's {@code [from, to)}, in blob order; the first call sorts them, in the caller. */
  List<LayerChunk> chunksStoredIn(long from, long to) {
    int[] order = blobOrder();
    int lo = 0;
    int hi = order.length;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (storedOffset(order[mid]) < from) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    List<LayerChunk> out = new ArrayList<>();
    for (int i = lo; i < order.length && storedOffset(order[i]) + storedLength(order[i]) <= to; i++) {
      out.add(chunk(order[i]));
    }
    return out;
  }

  /** The number of the entry named {@code name}, or -1. */
  int find(String name) {
    int h = name.hashCode();
    int mask = slotCount - 1;
    byte[] utf8 = null;
    for (int s = spread(h) & mask; ; s = (s + 1) & mask) {
      int i = slots.getInt(s * 4);
      if (i < 0) {
        return -1;
      }
      if (names.getInt(i * NAME + N_HASH) == h) {
        if (utf8 == null) {
          utf8 = name.getBytes(StandardCharsets.UTF_8);
        }
        if (nameEquals(names.getInt(i * NAME + N_NAME), utf8)) {
          return i;
        }
      }
    }
  }

  private boolean nameEquals(int ref, byte[] utf8) {
    if (paths.getInt(ref) != utf8.length) {
      return false;
    }
    for (int k = 0; k < utf8.length; k++) {
      if (paths.get(ref + 4 + k) != utf8[k]) {
        return false;
      }
    }
    return true;
  }

  /** Every entry in layer order, each made when asked for. */
  List<LayerEntry> entries() {
    return new Entries();
  }

  private final class Entries extends AbstractList<LayerEntry> implements RandomAccess {
    @Override
    public LayerEntry get(int i) {
      return entry(java.util.Objects.checkIndex(i, count));
    }

    @Override
    public int size() {
      return count;
    }
  }
}
