package dev.flatpull.fetcher.layer;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectReader;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.core.SizeLimitExceededException;
import java.io.IOException;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;

/**
 * Turns the JSON TOC shared by eStargz and zstd:chunked ({@code {"version":1,"entries":[...]}}) into a
 * {@link LayerIndex}, validating everything a reader relies on: names (no absolute paths, no {@code ..}), types,
 * sizes and limits, chunk coverage (contiguous, summing to the file size, each with a digest), stored ranges inside
 * the blob's data area and not overlapping, hard-link targets.
 */
final class TocParser {
  private static final ObjectReader READER =
      new ObjectMapper()
          .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false)
          .readerFor(TocJson.class);

  /** The TOC document; public fields for Jackson. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  static final class TocJson {
    public Integer version;
    public List<EntryJson> entries;
  }

  /** One TOC entry as written; fields absent from the JSON stay null. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  static final class EntryJson {
    public String name;
    public String type;
    public Long size;
    public String modtime;
    public String linkName;
    public Long mode;
    public Long uid;
    public Long gid;
    public String userName;
    public String groupName;
    public Long devMajor;
    public Long devMinor;
    public Map<String, String> xattrs;
    public String digest;
    public Long offset;
    public Long endOffset;
    public Long chunkOffset;
    public Long chunkSize;
    public String chunkDigest;
    public Long innerOffset;
    public String chunkType;
  }

  private TocParser() {}

  /**
   * Parses and validates a TOC.
   *
   * @param layer names the layer in error messages
   * @param dataEnd where the stored file data ends in the blob (eStargz: the TOC offset); every chunk lies before it
   */
  static LayerIndex parse(
      byte[] json, String layer, LayerFormat format, Digest blob, Optional<Digest> tocDigest,
      ChunkCompression compression, long dataEnd, FetchLimits limits) throws IOException {
    TocJson toc;
    try {
      toc = READER.readValue(json);
    } catch (IOException e) {
      throw new LayerFormatException(layer + ": TOC is not valid JSON: " + e.getMessage().lines().findFirst().orElse(""), e);
    }
    if (toc == null || toc.version == null || toc.version != 1) {
      throw new LayerFormatException(layer + ": TOC version is " + (toc == null ? null : toc.version) + ", expected 1");
    }
    if (toc.entries == null) {
      throw new LayerFormatException(layer + ": TOC has no entries array");
    }
    if (toc.entries.size() > limits.maxTocEntries()) {
      throw new SizeLimitExceededException(layer + ": TOC entry count " + toc.entries.size(), limits.maxTocEntries());
    }

    // containers/storage's zstd:chunked gives every stored chunk an endOffset; eStargz (and stargz's zstd:chunked) do
    // not, and a chunk then ends where the next one starts. A mix cannot be read safely.
    boolean explicitEnds = false;
    boolean implicitEnds = false;
    for (EntryJson e : toc.entries) {
      if (e != null && e.offset != null && ("reg".equals(e.type) || "chunk".equals(e.type)) && !"zeros".equals(e.chunkType)) {
        explicitEnds |= e.endOffset != null;
        implicitEnds |= e.endOffset == null;
      }
    }
    if (explicitEnds && implicitEnds) {
      throw new LayerFormatException(layer + ": TOC gives endOffset for some chunks but not for others");
    }
    TreeSet<Long> starts = new TreeSet<>();
    if (!explicitEnds) {
      for (EntryJson e : toc.entries) {
        if (e.offset != null && ("reg".equals(e.type) || "chunk".equals(e.type)) && e.offset > 0) {
          starts.add(e.offset);
        }
      }
    }

    List<Builder> builders = new ArrayList<>();
    Map<String, Builder> byName = new HashMap<>();
    List<String> order = new ArrayList<>();
    int landmarkAt = -1;
    Builder current = null;
    for (int i = 0; i < toc.entries.size(); i++) {
      EntryJson e = toc.entries.get(i);
      String where = layer + ": TOC entry " + i;
      if (e == null || e.type == null) {
        throw new LayerFormatException(where + " has no type");
      }
      String name = EntryNames.clean(e.name, where);
      if ("chunk".equals(e.type)) {
        if (current == null || !current.name.equals(name)) {
          throw new LayerFormatException(where + ": chunk of '" + name + "' does not follow its regular file");
        }
        current.addChunk(e, where, starts, dataEnd, explicitEnds, limits);
        continue;
      }
      EntryType type = EntryType.fromToc(e.type);
      if (type == null) {
        throw new LayerFormatException(where + " ('" + name + "') has unknown type '" + e.type + "'");
      }
      if (type == EntryType.REG && (name.equals(LayerIndex.PREFETCH_LANDMARK) || name.equals(LayerIndex.NO_PREFETCH_LANDMARK))) {
        if (name.equals(LayerIndex.PREFETCH_LANDMARK)) {
          landmarkAt = order.size();
        }
        current = null;
        continue;
      }
      Builder b = new Builder(name, type, e, where);
      if (type == EntryType.REG) {
        if (b.size > 0) {
          b.addChunk(e, where, starts, dataEnd, explicitEnds, limits);
        }
        current = b;
        order.add(name);
      } else {
        current = null;
      }
      builders.add(b);
      byName.put(name, b);
    }

    List<LayerEntry> entries = new ArrayList<>(builders.size());
    List<ByteRange> stored = new ArrayList<>();
    for (Builder b : builders) {
      LayerEntry entry = b.build(layer, limits);
      if (entry.type() == EntryType.HARDLINK) {
        Builder target = byName.get(entry.linkName());
        if (target == null || target.type == EntryType.HARDLINK || target.type == EntryType.DIR) {
          throw new LayerFormatException(
              layer + ": hard link '" + entry.name() + "' points at missing or invalid entry '" + entry.linkName() + "'");
        }
      }
      for (LayerChunk c : entry.chunks()) {
        if (!c.stored().isEmpty()) {
          stored.add(c.stored());
        }
      }
      entries.add(entry);
    }
    checkNoOverlap(stored, layer);
    List<String> prioritized = landmarkAt < 0 ? List.of() : List.copyOf(order.subList(0, landmarkAt));
    return new LayerIndex(format, blob, tocDigest, compression, entries, prioritized);
  }

  /** Different stored chunks must not overlap; chunks sharing one stored range (eStargz inner offsets) may. */
  private static void checkNoOverlap(List<ByteRange> stored, String layer) throws LayerFormatException {
    stored.sort((a, b) -> a.offset() != b.offset() ? Long.compare(a.offset(), b.offset()) : Long.compare(a.length(), b.length()));
    ByteRange prev = null;
    for (ByteRange r : stored) {
      if (prev != null && !r.equals(prev) && r.offset() < prev.end()) {
        throw new LayerFormatException(layer + ": TOC chunks overlap: stored ranges " + prev + " and " + r);
      }
      prev = r;
    }
  }

  private record LastTime(String text, Instant instant) {}

  /** Parsing is single-threaded per call, but calls may run in parallel: a racy cache of an immutable value is safe. */
  private static volatile LastTime lastTime;

  private static final class Builder {
    final String name;
    final EntryType type;
    final EntryJson json;
    final long size;
    final List<LayerChunk> chunks = new ArrayList<>(1);

    Builder(String name, EntryType type, EntryJson json, String where) throws LayerFormatException {
      this.name = name;
      this.type = type;
      this.json = json;
      this.size = json.size == null ? 0 : json.size;
      if (size < 0) {
        throw new LayerFormatException(where + " ('" + name + "') has negative size " + size);
      }
    }

    void addChunk(EntryJson c, String where, TreeSet<Long> starts, long dataEnd, boolean explicitEnds, FetchLimits limits)
        throws IOException {
      long fileOffset = c.chunkOffset == null ? 0 : c.chunkOffset;
      long chunkSize = c.chunkSize == null ? 0 : c.chunkSize;
      if (fileOffset < 0 || chunkSize < 0) {
        throw new LayerFormatException(where + " ('" + name + "') has negative chunkOffset or chunkSize");
      }
      if (chunkSize == 0) {
        chunkSize = size - fileOffset;
      }
      if (chunkSize <= 0 || fileOffset + chunkSize > size) {
        throw new LayerFormatException(
            where + " ('" + name + "') chunk at " + fileOffset + " of size " + chunkSize + " lies outside the file size " + size);
      }
      if (chunkSize > limits.maxChunkBytes()) {
        throw new SizeLimitExceededException(where + " ('" + name + "') chunk", limits.maxChunkBytes());
      }
      long inner = c.innerOffset == null ? 0 : c.innerOffset;
      if ("zeros".equals(c.chunkType)) {
        chunks.add(new LayerChunk(fileOffset, chunkSize, new ByteRange(0, 0), 0, null));
        return;
      }
      if (c.offset == null || c.offset < 0 || inner < 0) {
        throw new LayerFormatException(where + " ('" + name + "') has a missing or negative offset");
      }
      long start = c.offset;
      long end;
      if (explicitEnds) {
        if (c.endOffset == null || c.endOffset <= start) {
          throw new LayerFormatException(where + " ('" + name + "') has endOffset " + c.endOffset + " not after offset " + start);
        }
        end = c.endOffset;
      } else {
        Long next = starts.higher(start);
        end = next == null ? dataEnd : next;
      }
      if (start >= dataEnd || end > dataEnd) {
        throw new LayerFormatException(
            where + " ('" + name + "') stored range [" + start + ", " + end + ") lies outside the blob's data area [0, " + dataEnd + ")");
      }
      if (end - start > limits.maxChunkBytes() + 65536L) {
        throw new SizeLimitExceededException(where + " ('" + name + "') stored chunk", limits.maxChunkBytes());
      }
      String digestText = c.chunkDigest;
      Digest digest;
      try {
        digest = digestText != null && !digestText.isEmpty() ? Digest.parse(digestText) : null;
      } catch (IllegalArgumentException ex) {
        throw new LayerFormatException(where + " ('" + name + "'): " + ex.getMessage(), ex);
      }
      chunks.add(new LayerChunk(fileOffset, chunkSize, ByteRange.between(start, end), inner, digest));
    }

    LayerEntry build(String layer, FetchLimits limits) throws LayerFormatException {
      String where = layer + ": '" + name + "'";
      Optional<Digest> fileDigest;
      try {
        fileDigest = json.digest == null || json.digest.isEmpty() ? Optional.empty() : Optional.of(Digest.parse(json.digest));
      } catch (IllegalArgumentException ex) {
        throw new LayerFormatException(where + ": " + ex.getMessage(), ex);
      }
      List<LayerChunk> ordered = new ArrayList<>(chunks);
      ordered.sort((a, b) -> Long.compare(a.fileOffset(), b.fileOffset()));
      long expect = 0;
      for (int i = 0; i < ordered.size(); i++) {
        LayerChunk c = ordered.get(i);
        if (c.fileOffset() != expect) {
          throw new LayerFormatException(where + ": chunks leave a gap or overlap at file offset " + expect);
        }
        // A zstd:chunked main entry may span all of the file's frames; its own chunk ends where the next one starts.
        if (i + 1 < ordered.size() && !c.stored().isEmpty()) {
          ByteRange next = ordered.get(i + 1).stored();
          if (!next.isEmpty() && next.offset() > c.stored().offset() && next.offset() < c.stored().end()) {
            c = new LayerChunk(c.fileOffset(), c.size(), ByteRange.between(c.stored().offset(), next.offset()), c.innerOffset(), c.digest());
          }
        }
        if (c.digest() == null && !c.stored().isEmpty()) {
          if (ordered.size() == 1 && fileDigest.isPresent()) {
            c = new LayerChunk(c.fileOffset(), c.size(), c.stored(), c.innerOffset(), fileDigest.get());
          } else {
            throw new LayerFormatException(where + ": chunk at file offset " + c.fileOffset() + " has no digest to verify it");
          }
        }
        ordered.set(i, c);
        expect = c.fileEnd();
      }
      if (type == EntryType.REG && expect != size) {
        throw new LayerFormatException(where + ": chunks cover " + expect + " of " + size + " bytes");
      }
      Map<String, byte[]> xattrs = new LinkedHashMap<>();
      if (json.xattrs != null) {
        for (Map.Entry<String, String> x : json.xattrs.entrySet()) {
          try {
            xattrs.put(x.getKey(), Base64.getDecoder().decode(x.getValue() == null ? "" : x.getValue()));
          } catch (IllegalArgumentException ex) {
            throw new LayerFormatException(where + ": xattr '" + x.getKey() + "' is not base64", ex);
          }
        }
      }
      String link = json.linkName == null ? "" : json.linkName;
      if (type == EntryType.HARDLINK) {
        link = EntryNames.clean(link, where + " hard link target");
      } else if (type == EntryType.SYMLINK && link.isEmpty()) {
        throw new LayerFormatException(where + ": symlink without a target");
      }
      return new LayerEntry(
          name, type, type == EntryType.REG ? size : 0, (int) ((json.mode == null ? 0 : json.mode) & 07777),
          id(json.uid, where), id(json.gid, where), nz(json.userName), nz(json.groupName), time(json.modtime, where),
          link, (int) (json.devMajor == null ? 0 : json.devMajor), (int) (json.devMinor == null ? 0 : json.devMinor),
          xattrs, fileDigest, type == EntryType.REG ? ordered : List.of());
    }

    private static int id(Long v, String where) throws LayerFormatException {
      if (v == null) {
        return 0;
      }
      if (v < 0 || v > 0xFFFF_FFFFL) {
        throw new LayerFormatException(where + ": uid/gid " + v + " out of range");
      }
      return (int) (long) v;
    }

    private static String nz(String s) {
      return s == null ? "" : s;
    }

    private static Instant time(String s, String where) throws LayerFormatException {
      if (s == null || s.isEmpty()) {
        return Instant.EPOCH;
      }
      // Layers built in one go share few distinct modtimes; remembering the last one saves most parses.
      LastTime last = lastTime;
      if (last != null && last.text.equals(s)) {
        return last.instant;
      }
      try {
        Instant t = OffsetDateTime.parse(s).toInstant();
        lastTime = new LastTime(s, t);
        return t;
      } catch (DateTimeParseException e) {
        throw new LayerFormatException(where + ": modtime '" + s + "' is not RFC 3339", e);
      }
    }
  }
}
