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
 * A layer's entries as flat records in one buffer, with no Java object per entry: fixed-size entry and chunk records,
 * an open-addressing table of the entries by name, and one area for what varies in length (names, digests, owners,
 * extended attributes), each stored once where entries share it. A {@link LayerEntry} is made when asked for and
 * dropped by its caller. The buffer is on the heap when the index was just parsed from a TOC, or a read-only map of
 * the node's kept index file ({@link LayerIndexFile}), which is then used in place: a later mount of the layer reads
 * nothing but the pages its lookups touch (docs/benchmarks.md, index memory). Immutable, so thread-safe; only absolute
 * reads of the buffer are made.
 *
 * <p>Layout, little-endian: a {@value #HEAD}-byte head of counts, section offsets and the files' total size; per
 * entry, in layer order, a {@value #NAME}-byte record of what a tree and a lookup by name read (the name, its hash,
 * the type, whether it has extended attributes); per entry, the {@value #REC}-byte record of the rest; the chunk
 * records ({@value #CH} bytes each, every file's in file order); the name table ({@code int} entry numbers, -1 for a
 * free slot, a power of two at least twice the entries); and the variable area, addressed by offsets into it (-1 for
 * none), every entry's name first. A mount of a kept file thus touches the name records and the names, about a third
 * of the file; the rest is read where a file is opened or read.
 */
final class EntryTable {
  static final int HEAD = 48;
  private static final int H_COUNT = 0;
  private static final int H_CHUNKS = 4;
  private static final int H_SLOTS = 8;
  private static final int H_NAMES_AT = 12;
  private static final int H_RECORDS_AT = 16;
  private static final int H_CHUNKS_AT = 20;
  private static final int H_SLOTS_AT = 24;
  private static final int H_AREA_AT = 28;
  private static final int H_AREA_LENGTH = 32;
  private static final int H_CONTENT_SIZE = 40;

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

  private final ByteBuffer b;
  private final int count;
  private final int chunkCount;
  private final int slotCount;
  private final int namesAt;
  private final int recordsAt;
  private final int chunksAt;
  private final int slotsAt;
  private final int areaAt;
  private final int areaLength;

  private EntryTable(ByteBuffer b) {
    this.b = b.order(ByteOrder.LITTLE_ENDIAN);
    this.count = this.b.getInt(H_COUNT);
    this.chunkCount = this.b.getInt(H_CHUNKS);
    this.slotCount = this.b.getInt(H_SLOTS);
    this.namesAt = this.b.getInt(H_NAMES_AT);
    this.recordsAt = this.b.getInt(H_RECORDS_AT);
    this.chunksAt = this.b.getInt(H_CHUNKS_AT);
    this.slotsAt = this.b.getInt(H_SLOTS_AT);
    this.areaAt = this.b.getInt(H_AREA_AT);
    this.areaLength = this.b.getInt(H_AREA_LENGTH);
  }

  /**
   * The table in {@code b} (a kept file's), its head checked: counts and sections in place. The records are not read
   * here, so that opening a layer touches none of its pages: the file's checksum stands for their soundness, and a
   * reference outside the buffer would fail the one read that follows it ({@link IndexOutOfBoundsException}).
   *
   * @throws IllegalArgumentException saying what does not fit
   */
  static EntryTable wrap(ByteBuffer b) {
    if (b.limit() < HEAD) {
      throw new IllegalArgumentException("an entry table of " + b.limit() + " bytes");
    }
    EntryTable t = new EntryTable(b);
    t.check();
    return t;
  }

  private void check() {
    require(count >= 0 && chunkCount >= 0 && slotCount >= 0, "negative counts");
    require(slotCount >= 2 && Integer.bitCount(slotCount) == 1 && slotCount >= count, "a name table of " + slotCount);
    require(namesAt == HEAD && recordsAt == namesAt + (long) count * NAME && chunksAt == recordsAt + (long) count * REC
        && slotsAt == chunksAt + (long) chunkCount * CH && areaAt == slotsAt + (long) slotCount * 4
        && (long) areaAt + areaLength == b.limit(), "sections out of place");
  }

  private static void require(boolean ok, String what) {
    if (!ok) {
      throw new IllegalArgumentException(what);
    }
  }

  /**
   * The table of {@code entries} (a name listed twice: the later entry replaces the earlier one, in the earlier one's
   * place), on the heap.
   *
   * @throws LayerFormatException when the entries do not fit a table (more than 2 GiB of records)
   */
  static EntryTable of(List<LayerEntry> entries) throws LayerFormatException {
    Map<String, Integer> at = new HashMap<>(entries.size() * 2);
    List<LayerEntry> kept = new ArrayList<>(entries.size());
    for (LayerEntry e : entries) {
      Integer earlier = at.putIfAbsent(e.name(), kept.size());
      if (earlier != null) {
        kept.set(earlier, e);
      } else {
        kept.add(e);
      }
    }
    at = null;
    Area area = new Area();
    long chunks = 0;
    long contentSize = 0;
    for (LayerEntry e : kept) {
      chunks += e.chunks().size();
      contentSize += e.type() == EntryType.REG ? e.size() : 0;
    }
    int slots = Integer.highestOneBit(Math.max(2, kept.size() * 2 - 1)) << 1;
    // Names first and together: a mount's tree reads every name and nothing else of the area.
    int[] nameRefs = new int[kept.size()];
    for (int i = 0; i < kept.size(); i++) {
      nameRefs[i] = area.string(kept.get(i).name(), false);
    }
    int[] recordArea = new int[kept.size() * 4];
    int[] chunkDigests = new int[(int) Math.min(Integer.MAX_VALUE, chunks)];
    int c = 0;
    for (int i = 0; i < kept.size(); i++) {
      LayerEntry e = kept.get(i);
      recordArea[i * 4] = area.owner(e);
      recordArea[i * 4 + 1] = e.linkName() == null ? -1 : area.string(e.linkName(), false);
      recordArea[i * 4 + 2] = e.digest().map(area::digest).orElse(-1);
      recordArea[i * 4 + 3] = area.extra(e);
      for (LayerChunk ch : e.chunks()) {
        chunkDigests[c++] = ch.digest() == null ? -1 : area.digest(ch.digest());
      }
    }
    long size = HEAD + (long) kept.size() * (NAME + REC) + chunks * CH + (long) slots * 4 + area.length;
    if (size > Integer.MAX_VALUE - 64) {
      throw new LayerFormatException("a layer index of " + kept.size() + " entries and " + chunks
          + " chunks needs " + size + " bytes, more than one table holds");
    }
    ByteBuffer b = ByteBuffer.allocate((int) size).order(ByteOrder.LITTLE_ENDIAN);
    int namesAt = HEAD;
    int recordsAt = namesAt + kept.size() * NAME;
    int chunksAt = recordsAt + kept.size() * REC;
    int slotsAt = chunksAt + (int) chunks * CH;
    int areaAt = slotsAt + slots * 4;
    b.putInt(H_COUNT, kept.size()).putInt(H_CHUNKS, (int) chunks).putInt(H_SLOTS, slots).putInt(H_NAMES_AT, namesAt)
        .putInt(H_RECORDS_AT, recordsAt).putInt(H_CHUNKS_AT, chunksAt).putInt(H_SLOTS_AT, slotsAt)
        .putInt(H_AREA_AT, areaAt).putInt(H_AREA_LENGTH, area.length).putLong(H_CONTENT_SIZE, contentSize);
    c = 0;
    for (int s = 0; s < slots; s++) {
      b.putInt(slotsAt + s * 4, -1);
    }
    for (int i = 0; i < kept.size(); i++) {
      LayerEntry e = kept.get(i);
      int hash = e.name().hashCode();
      int n = namesAt + i * NAME;
      b.putInt(n + N_NAME, nameRefs[i]).putInt(n + N_HASH, hash).put(n + N_TYPE, (byte) e.type().ordinal())
          .put(n + N_FLAGS, e.xattrs().isEmpty() ? 0 : XATTRS);
      int r = recordsAt + i * REC;
      b.putShort(r + R_MODE, (short) e.mode()).putInt(r + R_OWNER, recordArea[i * 4]).putLong(r + R_SIZE, e.size())
          .putLong(r + R_MTIME_SECONDS, e.modTime().getEpochSecond()).putInt(r + R_MTIME_NANOS, e.modTime().getNano())
          .putInt(r + R_LINK, recordArea[i * 4 + 1]).putInt(r + R_DIGEST, recordArea[i * 4 + 2])
          .putInt(r + R_EXTRA, recordArea[i * 4 + 3]).putInt(r + R_FIRST_CHUNK, c)
          .putInt(r + R_CHUNK_COUNT, e.chunks().size());
      for (LayerChunk ch : e.chunks()) {
        int o = chunksAt + c * CH;
        b.putLong(o + C_FILE_OFFSET, ch.fileOffset()).putLong(o + C_SIZE, ch.size())
            .putLong(o + C_STORED_OFFSET, ch.stored().offset()).putLong(o + C_STORED_LENGTH, ch.stored().length())
            .putLong(o + C_INNER_OFFSET, ch.innerOffset()).putInt(o + C_DIGEST, chunkDigests[c]);
        c++;
      }
      // Names are unique now: the first free slot from the name's own is its place.
      int s = spread(hash) & (slots - 1);
      while (b.getInt(slotsAt + s * 4) >= 0) {
        s = (s + 1) & (slots - 1);
      }
      b.putInt(slotsAt + s * 4, i);
    }
    b.put(areaAt, area.bytes, 0, area.length);
    return new EntryTable(b);
  }

  /** The variable-length area as it is written: strings, digests and owners each once where entries share them. */
  private static final class Area {
    byte[] bytes = new byte[1 << 16];
    int length;
    // Only what repeats is shared: user and group names, attribute keys, owners, digests (a one-chunk file's digest is
    // its chunk's).
    private final Map<String, Integer> shared = new HashMap<>();
    private final Map<Digest, Integer> digests = new HashMap<>();
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
      int at = length;
      byte[] utf8 = s.getBytes(StandardCharsets.UTF_8);
      putInt(utf8.length);
      put(utf8);
      if (share) {
        shared.put(s, at);
      }
      return at;
    }

    int digest(Digest d) {
      return digests.computeIfAbsent(d, x -> {
        int at = length;
        ensure(1);
        bytes[length++] = (byte) (x.algorithm().equals("sha256") ? 1 : 2);
        put(x.raw());
        return at;
      });
    }

    int owner(LayerEntry e) {
      List<Object> key = Arrays.asList(e.uid(), e.gid(), e.userName(), e.groupName());
      Integer known = owners.get(key);
      if (known != null) {
        return known;
      }
      int user = e.userName() == null ? -1 : string(e.userName(), true);
      int group = e.groupName() == null ? -1 : string(e.groupName(), true);
      int at = length;
      putInt(e.uid());
      putInt(e.gid());
      putInt(user);
      putInt(group);
      owners.put(key, at);
      return at;
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

  /** The table's bytes, as the kept index file holds them. */
  ByteBuffer bytes() {
    return b.duplicate().clear();
  }

  int size() {
    return count;
  }

  int chunkCount() {
    return chunkCount;
  }

  private int record(int i) {
    return recordsAt + i * REC;
  }

  private int nameRecord(int i) {
    return namesAt + i * NAME;
  }

  EntryType type(int i) {
    return TYPES[b.get(nameRecord(i) + N_TYPE)];
  }

  /** The sum of the regular files' sizes. */
  long contentSize() {
    return b.getLong(H_CONTENT_SIZE);
  }

  long size(int i) {
    return b.getLong(record(i) + R_SIZE);
  }

  /** The entry numbered {@code i} (layer order), made for the caller. */
  LayerEntry entry(int i) {
    int r = record(i);
    int owner = areaAt + b.getInt(r + R_OWNER);
    int extra = b.getInt(r + R_EXTRA);
    int devMajor = 0;
    int devMinor = 0;
    Map<String, byte[]> xattrs = Map.of();
    if (extra >= 0) {
      int x = areaAt + extra;
      devMajor = b.getInt(x);
      devMinor = b.getInt(x + 4);
      int n = b.getInt(x + 8);
      x += 12;
      if (n > 0) {
        xattrs = new LinkedHashMap<>();
        for (int k = 0; k < n; k++) {
          String key = string(b.getInt(x));
          byte[] value = new byte[b.getInt(x + 4)];
          b.get(x + 8, value);
          xattrs.put(key, value);
          x += 8 + value.length;
        }
      }
    }
    int first = b.getInt(r + R_FIRST_CHUNK);
    int n = b.getInt(r + R_CHUNK_COUNT);
    List<LayerChunk> chunks = n == 0 ? List.of() : new ChunkList(first, n);
    return new LayerEntry(name(i), type(i), b.getLong(r + R_SIZE), b.getShort(r + R_MODE) & 0xffff,
        b.getInt(owner), b.getInt(owner + 4), string(b.getInt(owner + 8)), string(b.getInt(owner + 12)),
        Instant.ofEpochSecond(b.getLong(r + R_MTIME_SECONDS), b.getInt(r + R_MTIME_NANOS)), string(b.getInt(r + R_LINK)),
        devMajor, devMinor, xattrs, Optional.ofNullable(digest(b.getInt(r + R_DIGEST))), chunks);
  }

  /** A hard link's target or a symlink's, without making the entry; null for other types. */
  String linkName(int i) {
    return string(b.getInt(record(i) + R_LINK));
  }

  /** Whether entry {@code i} has extended attributes. */
  boolean hasXattrs(int i) {
    return (b.get(nameRecord(i) + N_FLAGS) & XATTRS) != 0;
  }

  /** Where entry {@code i}'s name (UTF-8) starts in {@link #bytes}. */
  int nameOffset(int i) {
    return areaAt + b.getInt(nameRecord(i) + N_NAME) + 4;
  }

  /** The length in bytes of entry {@code i}'s name. */
  int nameLength(int i) {
    return b.getInt(areaAt + b.getInt(nameRecord(i) + N_NAME));
  }

  /** The number of chunks of entry {@code i}. */
  int chunkCount(int i) {
    return b.getInt(record(i) + R_CHUNK_COUNT);
  }

  /** The name of entry {@code i}. */
  String name(int i) {
    return string(b.getInt(nameRecord(i) + N_NAME));
  }

  private String string(int ref) {
    if (ref < 0) {
      return null;
    }
    int at = areaAt + ref;
    byte[] utf8 = new byte[b.getInt(at)];
    b.get(at + 4, utf8);
    return new String(utf8, StandardCharsets.UTF_8);
  }

  private Digest digest(int ref) {
    if (ref < 0) {
      return null;
    }
    int at = areaAt + ref;
    byte[] raw = new byte[b.get(at) == 1 ? 32 : 64];
    b.get(at + 1, raw);
    return Digest.ofRaw(raw.length == 32 ? "sha256" : "sha512", raw);
  }

  private LayerChunk chunk(int c) {
    int o = chunksAt + c * CH;
    return new LayerChunk(b.getLong(o + C_FILE_OFFSET), b.getLong(o + C_SIZE),
        new ByteRange(b.getLong(o + C_STORED_OFFSET), b.getLong(o + C_STORED_LENGTH)), b.getLong(o + C_INNER_OFFSET),
        digest(b.getInt(o + C_DIGEST)));
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
    return b.getLong(chunksAt + c * CH + C_STORED_OFFSET);
  }

  private long storedLength(int c) {
    return b.getLong(chunksAt + c * CH + C_STORED_LENGTH);
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
      int ref = b.getInt(chunksAt + c * CH + C_DIGEST);
      if (storedLength(c) > 0 && ref >= 0 && test.test(digest(ref))) {
        return true;
      }
    }
    return false;
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
      int i = b.getInt(slotsAt + s * 4);
      if (i < 0) {
        return -1;
      }
      int r = nameRecord(i);
      if (b.getInt(r + N_HASH) == h) {
        if (utf8 == null) {
          utf8 = name.getBytes(StandardCharsets.UTF_8);
        }
        if (nameEquals(b.getInt(r + N_NAME), utf8)) {
          return i;
        }
      }
    }
  }

  private boolean nameEquals(int ref, byte[] utf8) {
    int at = areaAt + ref;
    if (b.getInt(at) != utf8.length) {
      return false;
    }
    for (int k = 0; k < utf8.length; k++) {
      if (b.get(at + 4 + k) != utf8[k]) {
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
