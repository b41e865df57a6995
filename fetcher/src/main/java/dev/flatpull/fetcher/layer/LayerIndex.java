package dev.flatpull.fetcher.layer;

import dev.flatpull.core.Digest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
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
  // Entries in TOC order, and an open-addressing table of their positions by name: 4 to 8 bytes per entry where a
  // LinkedHashMap costs 48 (a layer of a million entries; docs/benchmarks.md, index memory).
  private final LayerEntry[] ordered;
  private final int[] slots;
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
      List<LayerEntry> entries, List<String> prioritized) {
    this(format, blob, tocDigest, compression, entries, prioritized, Optional.empty(), false);
  }

  LayerIndex(
      LayerFormat format, Digest blob, Optional<Digest> tocDigest, ChunkCompression compression,
      List<LayerEntry> entries, List<String> prioritized, Optional<Digest> tarSplitDigest, boolean tarSplitChecked) {
    this.tarSplitDigest = tarSplitDigest;
    this.tarSplitChecked = tarSplitChecked;
    this.kept = false;
    this.tarSplit = null;
    this.tarSplitLength = 0;
    this.format = format;
    this.blob = blob;
    this.tocDigest = tocDigest;
    this.compression = compression;
    int capacity = Integer.highestOneBit(Math.max(4, entries.size() * 2 - 1)) << 1;
    int[] table = new int[capacity];
    Arrays.fill(table, -1);
    List<LayerEntry> kept = new ArrayList<>(entries.size());
    for (LayerEntry e : entries) {
      // A name listed twice: the later entry replaces the earlier one, in the earlier one's place.
      int slot = find(table, kept, e.name());
      if (table[slot] >= 0) {
        kept.set(table[slot], e);
      } else {
        table[slot] = kept.size();
        kept.add(e);
      }
    }
    this.ordered = kept.toArray(new LayerEntry[0]);
    this.slots = table;
    this.prioritized = List.copyOf(prioritized);
  }

  /** The same index, its TOC now known to match the layer's verified tar-split. */
  private LayerIndex(LayerIndex checked, byte[] tarSplit, long tarSplitLength) {
    this(checked, tarSplit, tarSplitLength, true, checked.kept);
  }

  private LayerIndex(LayerIndex checked, byte[] tarSplit, long tarSplitLength, boolean tarSplitChecked, boolean kept) {
    this.kept = kept;
    this.tarSplit = tarSplit;
    this.tarSplitLength = tarSplitLength;
    this.format = checked.format;
    this.blob = checked.blob;
    this.tocDigest = checked.tocDigest;
    this.compression = checked.compression;
    this.ordered = checked.ordered;
    this.slots = checked.slots;
    this.prioritized = checked.prioritized;
    this.tarSplitDigest = checked.tarSplitDigest;
    this.tarSplitChecked = tarSplitChecked;
  }

  /** The same index, read from the node's kept index file. */
  LayerIndex asKept() {
    return new LayerIndex(this, tarSplit, tarSplitLength, tarSplitChecked, true);
  }

  /** Whether this index was read from the node's kept index file ({@link LayerIndexFile}), not parsed from a TOC. */
  public boolean fromKeptFile() {
    return kept;
  }

  /** @param tarSplit the verified tar-split's zstd frame, of {@code length} bytes decompressed */
  LayerIndex withTarSplitChecked(byte[] tarSplit, long length) {
    return new LayerIndex(this, tarSplit, length);
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

  /** The slot of {@code name} in {@code table}: where it is, or the free one where it would go. */
  private static int find(int[] table, List<LayerEntry> byIndex, String name) {
    int mask = table.length - 1;
    int h = name.hashCode();
    int i = (h ^ (h >>> 16)) & mask;
    while (table[i] >= 0 && !byIndex.get(table[i]).name().equals(name)) {
      i = (i + 1) & mask;
    }
    return i;
  }

  private LayerEntry lookup(String name) {
    int mask = slots.length - 1;
    int h = name.hashCode();
    int i = (h ^ (h >>> 16)) & mask;
    while (slots[i] >= 0) {
      LayerEntry e = ordered[slots[i]];
      if (e.name().equals(name)) {
        return e;
      }
      i = (i + 1) & mask;
    }
    return null;
  }

  /** All entries in TOC order (landmark files excluded). */
  public Collection<LayerEntry> entries() {
    return Collections.unmodifiableList(Arrays.asList(ordered));
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
    int n = 0;
    for (LayerEntry e : ordered) {
      n += e.chunks().size();
    }
    return n;
  }

  /** The sum of regular file sizes. */
  public long contentSize() {
    long n = 0;
    for (LayerEntry e : ordered) {
      if (e.type() == EntryType.REG) {
        n += e.size();
      }
    }
    return n;
  }
}
