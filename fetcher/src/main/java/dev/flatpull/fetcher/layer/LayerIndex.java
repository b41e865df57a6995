package dev.flatpull.fetcher.layer;

import dev.flatpull.core.Digest;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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
  private final Map<String, LayerEntry> entries;
  private final List<String> prioritized;

  LayerIndex(
      LayerFormat format, Digest blob, Optional<Digest> tocDigest, ChunkCompression compression,
      List<LayerEntry> entries, List<String> prioritized) {
    this.format = format;
    this.blob = blob;
    this.tocDigest = tocDigest;
    this.compression = compression;
    Map<String, LayerEntry> m = new LinkedHashMap<>();
    for (LayerEntry e : entries) {
      m.put(e.name(), e);
    }
    this.entries = Collections.unmodifiableMap(m);
    this.prioritized = List.copyOf(prioritized);
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

  /** All entries in TOC order (landmark files excluded). */
  public Collection<LayerEntry> entries() {
    return entries.values();
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
    return Optional.ofNullable(entries.get(p));
  }

  /** The entry that holds the content of {@code e}: itself, or the target of a hard link. */
  public LayerEntry contentOf(LayerEntry e) {
    LayerEntry cur = e;
    for (int hops = 0; cur.type() == EntryType.HARDLINK && hops < 8; hops++) {
      LayerEntry next = entries.get(cur.linkName());
      if (next == null) {
        break;
      }
      cur = next;
    }
    return cur;
  }

  public int chunkCount() {
    int n = 0;
    for (LayerEntry e : entries.values()) {
      n += e.chunks().size();
    }
    return n;
  }

  /** The sum of regular file sizes. */
  public long contentSize() {
    long n = 0;
    for (LayerEntry e : entries.values()) {
      if (e.type() == EntryType.REG) {
        n += e.size();
      }
    }
    return n;
  }
}
