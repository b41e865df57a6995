package dev.flatpull.fetcher.layer;

import dev.flatpull.core.Digest;
import java.util.Collection;
import java.util.List;
import java.io.IOException;
import java.util.Optional;

/**
 * The verified index of one layer: every entry with its metadata and, for regular files, the chunks that hold its
 * content. Built from an eStargz or zstd:chunked TOC after its digest was checked, or locally from a verified plain
 * layer. Immutable and thread-safe.
 */
public final class LayerIndex {
  public static final String PREFETCH_LANDMARK = ".prefetch.landmark";
  public static final String NO_PREFETCH_LANDMARK = ".no.prefetch.landmark";

  private final LayerFormat format;
  private final Digest blob;
  private final Optional<Digest> tocDigest;
  private final ChunkCompression compression;
  // Entries in TOC order as flat records with a table of their positions by name: no Java object per entry (a layer of
  // a million entries; docs/benchmarks.md, index memory).
  private final EntryTable table;
  private final List<String> prioritized;
  private final Optional<Digest> tarSplitDigest;
  private final boolean tarSplitChecked;
  // The verified tar-split, compressed as the layer holds it (a few hundred KiB for thousands of entries): kept to
  // rebuild the tar stream's digest once the layer's content is local.
  private final byte[] tarSplit;
  private final long tarSplitLength;
  // Whether this index was read from the node's kept index file rather than parsed from the TOC (for log lines).
  private final boolean kept;

  LayerIndex(
      LayerFormat format, Digest blob, Optional<Digest> tocDigest, ChunkCompression compression,
      List<LayerEntry> entries, List<String> prioritized) throws LayerFormatException {
    this(format, blob, tocDigest, compression, entries, prioritized, Optional.empty(), false);
  }

  LayerIndex(
      LayerFormat format, Digest blob, Optional<Digest> tocDigest, ChunkCompression compression,
      List<LayerEntry> entries, List<String> prioritized, Optional<Digest> tarSplitDigest, boolean tarSplitChecked)
      throws LayerFormatException {
    this(format, blob, tocDigest, compression, EntryTable.of(entries), prioritized, tarSplitDigest, tarSplitChecked,
        null, 0, false);
  }

  /**
   * @param tarSplit the verified tar-split's zstd frame, of {@code tarSplitLength} bytes decompressed, or null
   * @param kept whether the index was read from the node's kept index file
   */
  LayerIndex(
      LayerFormat format, Digest blob, Optional<Digest> tocDigest, ChunkCompression compression, EntryTable table,
      List<String> prioritized, Optional<Digest> tarSplitDigest, boolean tarSplitChecked, byte[] tarSplit,
      long tarSplitLength, boolean kept) {
    this.format = format;
    this.blob = blob;
    this.tocDigest = tocDigest;
    this.compression = compression;
    this.table = table;
    this.prioritized = List.copyOf(prioritized);
    this.tarSplitDigest = tarSplitDigest;
    this.tarSplitChecked = tarSplitChecked;
    this.tarSplit = tarSplit;
    this.tarSplitLength = tarSplitLength;
    this.kept = kept;
  }

  /** The entries' records, for the kept index file. */
  EntryTable table() {
    return table;
  }

  /** Whether this index was read from the node's kept index file ({@link LayerIndexFile}), not parsed from a TOC. */
  public boolean fromKeptFile() {
    return kept;
  }

  /** @param tarSplit the verified tar-split's zstd frame, of {@code length} bytes decompressed */
  LayerIndex withTarSplitChecked(byte[] tarSplit, long length) {
    return new LayerIndex(format, blob, tocDigest, compression, table, prioritized, tarSplitDigest, true, tarSplit,
        length, kept);
  }

  /**
   * The digest of the layer's uncompressed tar stream (its diff_id), rebuilt from the verified tar-split and the
   * files' content as {@code content} reads it (through the page cache, once the layer is local); empty without a
   * tar-split, whose headers would have to be fetched.
   */
  public Optional<Digest> rebuiltDiffId(TarSplit.Content content) throws IOException {
    if (tarSplit == null) {
      return Optional.empty();
    }
    return Optional.of(TarSplit.rebuiltDigest(tarSplit, tarSplitLength, this, content));
  }

  /** The verified tar-split's zstd frame, or null without one (the index file keeps it). */
  byte[] tarSplitFrame() {
    return tarSplit;
  }

  /** The tar-split's decompressed length; 0 without one. */
  long tarSplitLength() {
    return tarSplitLength;
  }

  /** The digest a zstd:chunked TOC gives its tar-split ({@code tarSplitDigest}, containers/storage 1.54 and later). */
  Optional<Digest> tarSplitDigest() {
    return tarSplitDigest;
  }

  /**
   * Whether the entries were checked against the layer's tar-split, verified by its digest (zstd:chunked with a
   * tar-split), so that an ordinary pull of the layer unpacks the same metadata. False for eStargz and for zstd:chunked
   * layers written without one (containers/storage before 1.47).
   */
  public boolean tarSplitChecked() {
    return tarSplitChecked;
  }

  public LayerFormat format() {
    return format;
  }

  /** The digest of the layer blob the chunks are read from. */
  public Digest blob() {
    return blob;
  }

  /** The digest of the TOC (eStargz: of its JSON; zstd:chunked: of the compressed manifest); empty for plain layers. */
  public Optional<Digest> tocDigest() {
    return tocDigest;
  }

  public ChunkCompression compression() {
    return compression;
  }

  private LayerEntry lookup(String name) {
    int i = table.find(name);
    return i < 0 ? null : table.entry(i);
  }

  /** All entries in TOC order (landmark files excluded). */
  public Collection<LayerEntry> entries() {
    return table.entries();
  }

  /** The number of entries: {@link #entries}' size, entries numbered from 0 in that order. */
  public int entryCount() {
    return table.size();
  }

  /** Entry {@code i} of {@link #entries}, made for the caller. */
  public LayerEntry entryAt(int i) {
    return table.entry(java.util.Objects.checkIndex(i, table.size()));
  }

  /**
   * The numbers of the entries holding a chunk whose digest is one of {@code digests}, in {@link #entries}' order,
   * found without making an entry, a chunk or a digest for the others.
   */
  public int[] entriesHoldingAny(java.util.Set<Digest> digests) {
    return table.entriesHoldingAny(digests);
  }

  /** The name of entry {@code i}, without making the entry. */
  public String nameAt(int i) {
    return table.name(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The type of entry {@code i}, without making the entry. */
  public EntryType typeAt(int i) {
    return table.type(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The link name of entry {@code i} (a hard link's or a symlink's target), without making the entry; else null. */
  public String linkNameAt(int i) {
    return table.linkName(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The size of entry {@code i}, without making the entry. */
  public long sizeAt(int i) {
    return table.size(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The permission bits of entry {@code i} (with setuid, setgid and sticky), without making the entry. */
  public int modeAt(int i) {
    return table.mode(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The owner's uid of entry {@code i}, without making the entry. */
  public int uidAt(int i) {
    return table.uid(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The owner's gid of entry {@code i}, without making the entry. */
  public int gidAt(int i) {
    return table.gid(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The modification time of entry {@code i}, without making the entry. */
  public java.time.Instant modTimeAt(int i) {
    java.util.Objects.checkIndex(i, table.size());
    return java.time.Instant.ofEpochSecond(table.modSeconds(i), table.modNanos(i));
  }

  /** The device's major number of entry {@code i} (0 for every type but a device), without making the entry. */
  public int devMajorAt(int i) {
    return table.devMajor(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The device's minor number of entry {@code i} (0 for every type but a device), without making the entry. */
  public int devMinorAt(int i) {
    return table.devMinor(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The number of chunks of entry {@code i} (0 for every type but a regular file), without making the entry. */
  public int chunkCountAt(int i) {
    return table.chunkCount(java.util.Objects.checkIndex(i, table.size()));
  }

  /** Whether entry {@code i} has extended attributes, without making the entry. */
  public boolean hasXattrsAt(int i) {
    return table.hasXattrs(java.util.Objects.checkIndex(i, table.size()));
  }

  /**
   * The bytes entries' names are read from ({@link #nameOffsetAt}, {@link #nameLengthAt}), read-only, for a caller
   * that works on names without making strings of them (a mount's tree of a million entries).
   */
  public java.nio.ByteBuffer nameBytes() {
    return table.nameBytes().asReadOnlyBuffer();
  }

  /** Where entry {@code i}'s name (UTF-8) starts in {@link #nameBytes}. */
  public int nameOffsetAt(int i) {
    return table.nameOffset(java.util.Objects.checkIndex(i, table.size()));
  }

  /** The length in bytes of entry {@code i}'s name. */
  public int nameLengthAt(int i) {
    return table.nameLength(java.util.Objects.checkIndex(i, table.size()));
  }

  /** Whether {@code test} holds for the digest of any chunk with stored bytes (in no particular order). */
  public boolean anyStoredChunk(java.util.function.Predicate<Digest> test) {
    return table.anyStoredChunk(test);
  }

  /**
   * The chunks whose stored bytes lie in the blob's {@code [from, to)}, in blob order (a read's neighbours). The first
   * call orders the layer's chunks by where they are stored, once.
   */
  public List<LayerChunk> chunksStoredIn(long from, long to) {
    return table.chunksStoredIn(from, to);
  }

  /** Names of the regular files placed before the prefetch landmark, in layer order; empty without one. */
  public List<String> prioritized() {
    return prioritized;
  }

  /** The entry at {@code path} ({@code /usr/bin/env} or {@code usr/bin/env}). */
  public Optional<LayerEntry> entry(String path) {
    String p = path;
    while (p.startsWith("/")) {
      p = p.substring(1);
    }
    while (p.endsWith("/")) {
      p = p.substring(0, p.length() - 1);
    }
    return Optional.ofNullable(lookup(p));
  }

  /** The number of the entry named exactly {@code name} (a clean path), or -1. */
  int numberOf(String name) {
    return table.find(name);
  }

  /** The entry that holds the content of {@code e}: itself, or the target of a hard link. */
  public LayerEntry contentOf(LayerEntry e) {
    LayerEntry cur = e;
    for (int hops = 0; cur.type() == EntryType.HARDLINK && hops < 8; hops++) {
      LayerEntry next = lookup(cur.linkName());
      if (next == null) {
        break;
      }
      cur = next;
    }
    return cur;
  }

  public int chunkCount() {
    return table.chunkCount();
  }

  /** The sum of regular file sizes. */
  public long contentSize() {
    return table.contentSize();
  }

}
