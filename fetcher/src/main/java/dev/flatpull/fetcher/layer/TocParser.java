package dev.flatpull.fetcher.layer;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.core.DigestMismatchException;
import java.io.IOException;
import java.io.InputStream;
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

/**
 * Turns the JSON TOC shared by eStargz and zstd:chunked ({@code {"version":1,"entries":[...]}}) into a
 * {@link LayerIndex}, validating everything a reader relies on: names (no absolute paths, no {@code ..}), types,
 * sizes and limits, chunk coverage (contiguous, summing to the file size, each with a digest), stored ranges inside
 * the blob's data area and not overlapping, hard-link targets.
 *
 * <p>Never holds a tree or an object per entry beyond the index it builds. A TOC held in memory (all but the largest) is
 * read by {@link TocJson}, once when its stored chunks start in its entries' order (as every writer flatpull knows
 * writes them: see {@link #onePass}); otherwise, and for a TOC too large to hold (streamed through Jackson's token
 * parser, the same walk with the same refusals), twice: the first pass reads the version, counts the entries against
 * the limit and gathers where stored chunks start (an eStargz chunk ends where the next begins), the second builds
 * each entry as it passes. A TOC of a million entries would otherwise cost a parsed object per entry on top of the
 * index (see docs/benchmarks.md).
 */
final class TocParser {
  // The caller closes what it opened: a parser closing its stream at the end of the document left the digest of a
  // streamed TOC (JSON over 64 MiB) unreadable ("Stream closed" from gzip).
  private static final JsonFactory JSON = JsonFactory.builder().disable(StreamReadFeature.AUTO_CLOSE_SOURCE).build();

  /** One TOC entry as written, refilled for every entry; fields absent from the JSON stay null. */
  static final class EntryJson {
    String name;
    String type;
    Long size;
    String modtime;
    String linkName;
    Long mode;
    Long uid;
    Long gid;
    String userName;
    String groupName;
    Long devMajor;
    Long devMinor;
    Map<String, String> xattrs;
    String digest;
    Long offset;
    Long endOffset;
    Long chunkOffset;
    Long chunkSize;
    String chunkDigest;
    Long innerOffset;
    String chunkType;

    void clear() {
      name = type = modtime = linkName = userName = groupName = digest = chunkDigest = chunkType = null;
      size = mode = uid = gid = devMajor = devMinor = offset = endOffset = chunkOffset = chunkSize = innerOffset = null;
      xattrs = null;
    }
  }

  private TocParser() {}

  /** What the first pass learns. */
  private static final class Survey {
    Integer version;
    String tarSplitDigest;
    boolean hasEntries;
    int entries;
    long[] starts = new long[1024];
    int startCount;

    void start(long offset) {
      if (startCount == starts.length) {
        starts = java.util.Arrays.copyOf(starts, starts.length * 2);
      }
      starts[startCount++] = offset;
    }
  }

  /** The fields the first pass needs: those that locate stored chunks. */
  private static final java.util.Set<String> SURVEYED = java.util.Set.of("type", "offset");

  /**
   * Reads one entry object (the parser is on its START_OBJECT) into {@code e}; with {@code survey}, only the
   * {@link #SURVEYED} fields, every other value skipped without making a string of it (the first pass reads every
   * entry once more than the index needs).
   */
  private static void readEntry(JsonParser p, EntryJson e, Where where, boolean survey) throws IOException {
    e.clear();
    while (p.nextToken() == JsonToken.FIELD_NAME) {
      String field = p.currentName();
      JsonToken t = p.nextToken();
      if (survey && !SURVEYED.contains(field)) {
        p.skipChildren();
        continue;
      }
      switch (field) {
        case "name" -> e.name = text(p, t, where, field);
        case "type" -> e.type = text(p, t, where, field);
        case "size" -> e.size = number(p, t, where, field);
        case "modtime" -> e.modtime = text(p, t, where, field);
        case "linkName" -> e.linkName = text(p, t, where, field);
        case "mode" -> e.mode = number(p, t, where, field);
        case "uid" -> e.uid = number(p, t, where, field);
        case "gid" -> e.gid = number(p, t, where, field);
        case "userName" -> e.userName = text(p, t, where, field);
        case "groupName" -> e.groupName = text(p, t, where, field);
        case "devMajor" -> e.devMajor = number(p, t, where, field);
        case "devMinor" -> e.devMinor = number(p, t, where, field);
        case "digest" -> e.digest = text(p, t, where, field);
        case "offset" -> e.offset = number(p, t, where, field);
        case "endOffset" -> e.endOffset = number(p, t, where, field);
        case "chunkOffset" -> e.chunkOffset = number(p, t, where, field);
        case "chunkSize" -> e.chunkSize = number(p, t, where, field);
        case "chunkDigest" -> e.chunkDigest = text(p, t, where, field);
        case "innerOffset" -> e.innerOffset = number(p, t, where, field);
        case "chunkType" -> e.chunkType = text(p, t, where, field);
        case "xattrs" -> e.xattrs = xattrs(p, t, where);
        default -> p.skipChildren();
      }
    }
  }

  private static String text(JsonParser p, JsonToken t, Where where, String field) throws IOException {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
      throw new LayerFormatException(where + ": field '" + field + "' is not a string");
    }
    return p.getValueAsString();
  }

  private static Long number(JsonParser p, JsonToken t, Where where, String field) throws IOException {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t == JsonToken.VALUE_NUMBER_INT || t == JsonToken.VALUE_NUMBER_FLOAT) {
      return p.getValueAsLong();
    }
    if (t == JsonToken.VALUE_STRING) {
      try {
        return Long.parseLong(p.getText().trim());
      } catch (NumberFormatException ex) {
        throw new LayerFormatException(where + ": field '" + field + "' is not a number: '" + p.getText() + "'");
      }
    }
    throw new LayerFormatException(where + ": field '" + field + "' is not a number");
  }

  private static Map<String, String> xattrs(JsonParser p, JsonToken t, Where where) throws IOException {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    if (t != JsonToken.START_OBJECT) {
      throw new LayerFormatException(where + ": field 'xattrs' is not an object");
    }
    Map<String, String> m = new LinkedHashMap<>();
    while (p.nextToken() == JsonToken.FIELD_NAME) {
      String k = p.currentName();
      m.put(k, text(p, p.nextToken(), where, "xattrs." + k));
    }
    return m;
  }

  /** The interface both passes see: each entry in turn, with its index. */
  private interface EntryVisitor {
    void visit(int i, EntryJson e) throws IOException;
  }

  /**
   * Streams the document: {@code top} sees the version, {@code visitor} each entry. Malformed JSON becomes a
   * {@link LayerFormatException}; {@code visitor}'s own exceptions pass through.
   */
  private static void stream(JsonSource json, String layer, Survey top, EntryVisitor visitor, long maxEntries)
      throws IOException {
    Optional<byte[]> held = json.held();
    if (held.isPresent()) {
      TocJson.read(held.get(), layer, top != null, maxEntries, new TocJson.Document() {
        @Override
        public void version(Integer v) {
          if (top != null) {
            top.version = v;
          }
        }

        @Override
        public void tarSplitDigest(String text) {
          if (top != null) {
            top.tarSplitDigest = text;
          }
        }

        @Override
        public void entries() {
          if (top != null) {
            top.hasEntries = true;
          }
        }

        @Override
        public void entry(int i, EntryJson e) throws IOException {
          visitor.visit(i, e);
        }

        @Override
        public void entriesEnd(int count) {
          if (top != null) {
            top.entries = count;
          }
        }
      });
    } else {
      try (InputStream in = json.open()) {
        stream(JSON.createParser(in), layer, top, visitor, maxEntries);
      }
    }
  }

  private static void stream(JsonParser parser, String layer, Survey top, EntryVisitor visitor, long maxEntries)
      throws IOException {
    try (JsonParser p = parser) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        throw new LayerFormatException(layer + ": TOC version is null, expected 1");
      }
      EntryJson e = new EntryJson();
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        String field = p.currentName();
        JsonToken t = p.nextToken();
        if (field.equals("version")) {
          if (top != null) {
            top.version = t == JsonToken.VALUE_NUMBER_INT ? Integer.valueOf(p.getIntValue())
                : t == JsonToken.VALUE_NULL ? null : Integer.valueOf(-1);
          }
          p.skipChildren();
        } else if (field.equals("tarSplitDigest")) {
          if (top != null) {
            top.tarSplitDigest = text(p, t, new Where(layer, -1, null), field);
          }
        } else if (field.equals("entries")) {
          if (t == JsonToken.VALUE_NULL) {
            continue;
          }
          if (t != JsonToken.START_ARRAY) {
            throw new LayerFormatException(layer + ": TOC entries is not an array");
          }
          if (top != null) {
            top.hasEntries = true;
          }
          int i = 0;
          JsonToken next;
          while ((next = p.nextToken()) != JsonToken.END_ARRAY) {
            Where where = new Where(layer, i, null);
            if (next == JsonToken.VALUE_NULL) {
              throw new LayerFormatException(where + " has no type");
            }
            if (next != JsonToken.START_OBJECT) {
              throw new LayerFormatException(where + " is not an object");
            }
            if (i >= maxEntries) {
              throw new SizeLimitExceededException(layer + ": TOC entry count " + (i + 1) + "+", maxEntries);
            }
            readEntry(p, e, where, top != null);
            visitor.visit(i, e);
            i++;
          }
          if (top != null) {
            top.entries = i;
          }
        } else {
          p.skipChildren();
        }
      }
      if (p.currentToken() != JsonToken.END_OBJECT) {
        throw new LayerFormatException(layer + ": TOC is not valid JSON: unexpected end of the document");
      }
    } catch (JsonProcessingException ex) {
      throw new LayerFormatException(
          layer + ": TOC is not valid JSON: " + ex.getOriginalMessage().lines().findFirst().orElse(""), ex);
    }
  }

  /**
   * Opens the TOC's JSON afresh for each pass: for a TOC too large to hold (up to {@code maxTocBytes}, hundreds of
   * MiB), decompressing it twice costs less than holding it whole.
   */
  interface JsonSource {
    InputStream open() throws IOException;

    /**
     * The whole document, when it is held in memory: then it is hashed and parsed from the array itself. From a stream
     * the parser refills an 8,000-byte buffer, and where a buffer happens to end (inside a number, say) takes a branch
     * that a warmed-up parser may never have taken: the compiled parser was thrown away at a node's first real TOC.
     */
    default Optional<byte[]> held() {
      return Optional.empty();
    }
  }

  /**
   * JSON of at most this many bytes is decompressed once and held for both passes. Decompressing was the largest part
   * of opening a TOC: the Debian + python3 layer's (5.8 MB of JSON) took 19 ms to gunzip, against 7 ms to tokenize
   * and 4 ms to hash, and was gunzipped twice.
   */
  static final int HELD_JSON_BYTES = 64 << 20;

  /**
   * A stream of JSON that knows its length before it is read (an eStargz TOC's tar entry): it is read into one array of
   * that length. Read without it, the JSON is gathered in pieces and copied into its array, twice its size allocated
   * (9-19 MB of a cold start's allocation in the FUSE manager, docs/benchmarks.md).
   */
  interface Sized {
    long length();
  }

  /** {@code json} held in memory when it has at most {@code limit} bytes, else as it was (opened again per pass). */
  static JsonSource held(JsonSource json, int limit) throws IOException {
    if (json.held().isPresent()) {
      return json;
    }
    byte[] bytes;
    try (InputStream in = json.open()) {
      long known = in instanceof Sized sized ? sized.length() : -1;
      if (known > limit) {
        return json;
      }
      if (known >= 0) {
        bytes = new byte[(int) known];
        int got = in.readNBytes(bytes, 0, bytes.length);
        if (got < bytes.length) {
          bytes = java.util.Arrays.copyOf(bytes, got); // shorter than it said: the digest or the parse refuses it
        } else if (in.read() >= 0) {
          return json; // longer than it said: streamed, as any TOC not held
        }
      } else {
        bytes = in.readNBytes(limit + 1);
        if (bytes.length > limit) {
          return json;
        }
      }
    }
    return held(bytes);
  }

  /** {@code bytes}, held. */
  static JsonSource held(byte[] bytes) {
    return new JsonSource() {
      @Override
      public InputStream open() {
        return new java.io.ByteArrayInputStream(bytes);
      }

      @Override
      public Optional<byte[]> held() {
        return Optional.of(bytes);
      }
    };
  }

  private static void checkDigest(String layer, Digest expected, java.security.MessageDigest md)
      throws DigestMismatchException {
    Digest actual = Digest.of(expected.algorithm(), md);
    if (!actual.equals(expected)) {
      throw new DigestMismatchException(layer + " TOC", expected, actual);
    }
  }

  /** Parses and validates a TOC held in memory (already verified). */
  static LayerIndex parse(
      byte[] json, String layer, LayerFormat format, Digest blob, Optional<Digest> tocDigest,
      ChunkCompression compression, long dataEnd, FetchLimits limits) throws IOException {
    return parse(held(json), Optional.empty(), layer, format, blob, tocDigest, compression, dataEnd, limits);
  }

  /**
   * Parses and validates a TOC.
   *
   * @param verify the digest the JSON must have: checked over every byte of the first pass, before the second builds
   *     anything from them (a TOC that is both malformed and of the wrong digest is refused for its digest)
   * @param layer names the layer in error messages
   * @param dataEnd where the stored file data ends in the blob (eStargz: the TOC offset); every chunk lies before it
   */
  static LayerIndex parse(
      JsonSource json, Optional<Digest> verify, String layer, LayerFormat format, Digest blob,
      Optional<Digest> tocDigest, ChunkCompression compression, long dataEnd, FetchLimits limits) throws IOException {
    return parse(json, verify, layer, format, blob, tocDigest, compression, dataEnd, limits, HELD_JSON_BYTES);
  }

  /** The parse above, holding JSON of at most {@code heldLimit} bytes (the rest is streamed, twice). */
  static LayerIndex parse(
      JsonSource json, Optional<Digest> verify, String layer, LayerFormat format, Digest blob,
      Optional<Digest> tocDigest, ChunkCompression compression, long dataEnd, FetchLimits limits, int heldLimit)
      throws IOException {
    json = held(json, heldLimit);
    Optional<byte[]> held = json.held();
    if (held.isPresent()) {
      if (verify.isPresent()) {
        java.security.MessageDigest md = verify.get().newMessageDigest();
        md.update(held.get());
        checkDigest(layer, verify.get(), md);
      }
      Optional<LayerIndex> once = onePass(held.get(), layer, format, blob, tocDigest, compression, dataEnd, limits);
      if (once.isPresent()) {
        return once.get();
      }
    }
    Survey survey = new Survey();
    // Where each stored chunk ends comes from where the next one starts (see Builder#addChunk), so the first pass
    // gathers every start.
    EntryVisitor surveyor = (i, e) -> {
      if (isStart(e)) {
        survey.start(e.offset);
      }
    };
    if (held.isPresent()) {
      stream(json, layer, survey, surveyor, limits.maxTocEntries());
    } else {
      try (InputStream raw = json.open()) {
        java.security.MessageDigest md = verify.map(Digest::newMessageDigest).orElse(null);
        InputStream in = md == null ? raw : new java.security.DigestInputStream(raw, md);
        LayerFormatException malformed = null;
        try {
          stream(JSON.createParser(in), layer, survey, surveyor, limits.maxTocEntries());
        } catch (LayerFormatException e) {
          malformed = e;
        }
        if (md != null) {
          in.transferTo(java.io.OutputStream.nullOutputStream());
          checkDigest(layer, verify.get(), md);
        }
        if (malformed != null) {
          throw malformed;
        }
      }
    }
    if (survey.version == null || survey.version != 1) {
      throw new LayerFormatException(layer + ": TOC version is " + survey.version + ", expected 1");
    }
    if (!survey.hasEntries) {
      throw new LayerFormatException(layer + ": TOC has no entries array");
    }
    long[] starts = java.util.Arrays.copyOf(survey.starts, survey.startCount);
    java.util.Arrays.sort(starts);
    survey.starts = null;
    IndexBuild build = new IndexBuild(layer, dataEnd, limits, start -> Builder.higher(starts, start, dataEnd),
        survey.entries);
    stream(json, layer, null, build::entry, limits.maxTocEntries());
    return build.finish(format, blob, tocDigest, compression, survey.tarSplitDigest);
  }

  /** Whether {@code e} starts a stored chunk: where the one before it ends. */
  private static boolean isStart(EntryJson e) {
    return e.offset != null && ("reg".equals(e.type) || "chunk".equals(e.type)) && e.offset > 0;
  }

  /**
   * The most entries that wait at once in one pass before it gives way to two: a run of files sharing a stored member
   * waits whole, and a TOC of many entries at one offset would otherwise hold an object per entry.
   */
  static final int MAX_WAITING = 4096;

  /** Why a TOC is read twice after all (no stack trace: it is not an error). */
  private static final class TwoPassesNeeded extends RuntimeException {
    static final TwoPassesNeeded INSTANCE = new TwoPassesNeeded();

    private TwoPassesNeeded() {
      super(null, null, false, false);
    }
  }

  /**
   * A held TOC read in one pass, when it can be: its version comes before its entries, and its stored chunks start in
   * the order of their entries (every writer flatpull knows writes them so), so that a chunk's end, the next greater
   * start, is known once a later entry starts after it; until then its file, and every entry after it, waits. Empty
   * when it cannot be, and for any TOC the index refuses: the two passes then say why, as they always have. One pass
   * saves the first pass, 9 of 70 ms for the Debian + python3 layer's TOC under C1.
   */
  static Optional<LayerIndex> onePass(byte[] json, String layer, LayerFormat format, Digest blob,
      Optional<Digest> tocDigest, ChunkCompression compression, long dataEnd, FetchLimits limits) {
    Survey top = new Survey();
    // About 700 bytes of JSON per entry in distributions' layers (5.8 MB for 8,350 entries): the table is sized a
    // little above, and grows past a low guess.
    IndexBuild build = new IndexBuild(layer, dataEnd, limits, start -> -1, json.length / 640);
    long[] last = {0};
    try {
      TocJson.read(json, layer, false, limits.maxTocEntries(), new TocJson.Document() {
        @Override
        public void version(Integer v) {
          top.version = v;
        }

        @Override
        public void tarSplitDigest(String text) {
          top.tarSplitDigest = text;
        }

        @Override
        public void entries() {
          top.hasEntries = true;
        }

        @Override
        public void entry(int i, EntryJson e) throws IOException {
          if (top.version == null || top.version != 1) {
            throw TwoPassesNeeded.INSTANCE;
          }
          if (isStart(e)) {
            if (e.offset < last[0]) {
              throw TwoPassesNeeded.INSTANCE;
            }
            if (e.offset > last[0]) {
              build.resolve(e.offset);
              last[0] = e.offset;
            }
          }
          build.entry(i, e);
        }

        @Override
        public void entriesEnd(int count) {}
      });
      if (top.version == null || top.version != 1 || !top.hasEntries) {
        return Optional.empty();
      }
      return Optional.of(build.finishAt(dataEnd, format, blob, tocDigest, compression, top.tarSplitDigest));
    } catch (TwoPassesNeeded | IOException e) {
      return Optional.empty();
    }
  }

  /**
   * The index as its entries arrive. Where a chunk's end is not known yet ({@code ends} gives -1: one pass), its file
   * and every entry after it wait, in order, until a later start gives it ({@link #resolve}).
   */
  private static final class IndexBuild {
    private static final Object LANDMARK = new Object();
    private final String layer;
    private final long dataEnd;
    private final FetchLimits limits;
    private final ChunkEnds ends;
    private final Interner strings = new Interner();
    // Entries go into the index's table as they are read; no entry object outlives its own (a TOC of a million
    // entries held that many until the table was built from them, docs/benchmarks.md, index memory).
    private final EntryTable.Builder entries;
    private final List<LayerEntry> hardLinks = new ArrayList<>();
    private final List<ByteRange> stored = new ArrayList<>();
    // Each file's frames as its entry's endOffset bounds them (containers/storage): files must not share frames.
    private final List<ByteRange> frames = new ArrayList<>();
    // The regular files' entry numbers in layer order (the names before the prefetch landmark are the prioritized
    // files): 4 bytes a file, where a list of their names held a string each.
    private final FileNumbers order = new FileNumbers();
    // What waits for a chunk's end, in the TOC's order: files (Builder), other entries (LayerEntry), LANDMARK.
    private final java.util.ArrayDeque<Object> waiting = new java.util.ArrayDeque<>();
    private int landmarkAt = -1;
    private Builder current;

    IndexBuild(String layer, long dataEnd, FetchLimits limits, ChunkEnds ends, int expected) {
      this.layer = layer;
      this.dataEnd = dataEnd;
      this.limits = limits;
      this.ends = ends;
      this.entries = new EntryTable.Builder(expected);
    }

    void entry(int i, EntryJson e) throws IOException {
      Where where = new Where(layer, i, null);
      if (e.type == null) {
        throw new LayerFormatException(where + " has no type");
      }
      String name = EntryNames.clean(e.name, where);
      if ("chunk".equals(e.type)) {
        if (current == null || !current.name.equals(name)) {
          throw new LayerFormatException(where + ": chunk of '" + name + "' does not follow its regular file");
        }
        current.addChunk(e, where, ends, dataEnd, limits, strings);
        return;
      }
      if (current != null) {
        file(current);
        current = null;
      }
      EntryType type = EntryType.fromToc(e.type);
      if (type == null) {
        throw new LayerFormatException(where + " ('" + name + "') has unknown type '" + e.type + "'");
      }
      if (type == EntryType.REG && (name.equals(LayerIndex.PREFETCH_LANDMARK) || name.equals(LayerIndex.NO_PREFETCH_LANDMARK))) {
        if (name.equals(LayerIndex.PREFETCH_LANDMARK)) {
          if (waiting.isEmpty()) {
            landmarkAt = order.size;
          } else {
            hold(LANDMARK);
          }
        }
        return;
      }
      Builder b = new Builder(name, type, e, where, strings);
      if (type == EntryType.REG) {
        if (b.size > 0) {
          b.addChunk(e, where, ends, dataEnd, limits, strings);
        }
        current = b;
      } else if (waiting.isEmpty()) {
        add(b.build(layer), entries, hardLinks, stored);
      } else {
        hold(b.build(layer));
      }
    }

    private void file(Builder b) throws IOException {
      if (waiting.isEmpty() && !b.waits()) {
        order.add(add(b.build(layer), entries, hardLinks, stored));
        b.frames().ifPresent(frames::add);
      } else {
        hold(b);
      }
    }

    private void hold(Object o) {
      if (waiting.size() >= MAX_WAITING) {
        throw TwoPassesNeeded.INSTANCE;
      }
      waiting.add(o);
    }

    /** Every chunk whose end is not known yet ends at {@code next}: a start after all of theirs. */
    void resolve(long next) throws IOException {
      if (waiting.isEmpty() && (current == null || !current.waits())) {
        return;
      }
      for (Object o : waiting) {
        if (o instanceof Builder b) {
          b.resolve(next, dataEnd, limits);
        }
      }
      if (current != null) {
        current.resolve(next, dataEnd, limits);
      }
      while (!waiting.isEmpty()) {
        Object o = waiting.poll();
        if (o instanceof Builder b) {
          order.add(add(b.build(layer), entries, hardLinks, stored));
          b.frames().ifPresent(frames::add);
        } else if (o == LANDMARK) {
          landmarkAt = order.size;
        } else {
          add((LayerEntry) o, entries, hardLinks, stored);
        }
      }
    }

    /** The index, once every entry is read and what still waits ends at {@code end} (one pass: the data's end). */
    LayerIndex finishAt(long end, LayerFormat format, Digest blob, Optional<Digest> tocDigest,
        ChunkCompression compression, String tarSplitDigest) throws IOException {
      if (current != null) {
        file(current);
        current = null;
      }
      resolve(end);
      return finish(format, blob, tocDigest, compression, tarSplitDigest);
    }

    LayerIndex finish(LayerFormat format, Digest blob, Optional<Digest> tocDigest, ChunkCompression compression,
        String tarSplitDigest) throws IOException {
      if (current != null) {
        file(current);
        current = null;
      }
      if (!waiting.isEmpty()) {
        throw new IllegalStateException("entries still wait for their chunks' ends");
      }
      if (!hardLinks.isEmpty()) {
        for (LayerEntry link : hardLinks) {
          int at = entries.find(link.linkName());
          EntryType target = at < 0 ? null : entries.type(at);
          if (target == null || target == EntryType.HARDLINK || target == EntryType.DIR) {
            throw new LayerFormatException(
                layer + ": hard link '" + link.name() + "' points at missing or invalid entry '" + link.linkName() + "'");
          }
        }
      }
      checkNoOverlap(stored, layer);
      checkNoOverlap(frames, layer);
      List<String> prioritized = new ArrayList<>();
      for (int k = 0; k < Math.max(0, landmarkAt); k++) {
        prioritized.add(entries.name(order.numbers[k]));
      }
      Optional<Digest> tarSplit;
      try {
        tarSplit = tarSplitDigest == null || tarSplitDigest.isEmpty() ? Optional.empty()
            : Optional.of(Digest.parse(tarSplitDigest));
      } catch (IllegalArgumentException e) {
        throw new LayerFormatException(layer + ": TOC tarSplitDigest: " + e.getMessage(), e);
      }
      return new LayerIndex(format, blob, tocDigest, compression, entries.build(), prioritized, tarSplit, false, null,
          0, false);
    }
  }

  /** Where a stored chunk starting at {@code start} ends: the least start after it, or -1 when not known yet. */
  private interface ChunkEnds {
    long after(long start);
  }

  /** Entry numbers in the order they are added. */
  private static final class FileNumbers {
    int[] numbers = new int[64];
    int size;

    void add(int number) {
      if (size == numbers.length) {
        numbers = java.util.Arrays.copyOf(numbers, size * 2);
      }
      numbers[size++] = number;
    }
  }

  /** Adds {@code entry} to the table; returns its number there. */
  private static int add(LayerEntry entry, EntryTable.Builder entries, List<LayerEntry> hardLinks,
      List<ByteRange> stored) throws LayerFormatException {
    if (entry.type() == EntryType.HARDLINK) {
      hardLinks.add(entry);
    }
    for (LayerChunk c : entry.chunks()) {
      if (c.storedLength() != 0) {
        stored.add(c.stored());
      }
    }
    return entries.add(entry);
  }

  /**
   * One instance per distinct value while a TOC is parsed: owner names, modification times and digests repeat across
   * entries (a file's digest is its only chunk's), and the index keeps every entry.
   */
  /**
   * Where in a TOC an entry is (the TOC itself for {@code entry} -1), for error messages. Made into text only when a message is: a TOC has up to a million
   * entries, and a string per entry (and per chunk) was a sixth of what a cold start's TOC parse allocated.
   */
  record Where(String layer, int entry, String name, String suffix) {
    Where(String layer, int entry, String name) {
      this(layer, entry, name, "");
    }

    /** The same entry, named (once its name is known). */
    Where named(String n) {
      return new Where(layer, entry, n, suffix);
    }

    /** The same place with {@code more} said after it. */
    Where said(String more) {
      return new Where(layer, entry, name, suffix + more);
    }

    @Override
    public String toString() {
      return layer + ": TOC" + (entry < 0 ? "" : " entry " + entry) + (name == null ? "" : " ('" + name + "')") + suffix;
    }
  }

  /**
   * An RFC 3339 time as TOCs write it ({@code 2024-05-01T10:00:00Z}, with a fraction or an offset): the usual forms
   * read in place, since a layer's files mostly differ in their times and {@link OffsetDateTime#parse} allocated a
   * parse state per entry; anything else, and anything out of range, through the full parser.
   */
  static Instant rfc3339(String s) {
    int n = s.length();
    if (n >= 20 && s.charAt(4) == '-' && s.charAt(7) == '-' && (s.charAt(10) == 'T' || s.charAt(10) == 't')
        && s.charAt(13) == ':' && s.charAt(16) == ':') {
      int year = digits(s, 0, 4);
      int month = digits(s, 5, 2);
      int day = digits(s, 8, 2);
      int hour = digits(s, 11, 2);
      int minute = digits(s, 14, 2);
      int second = digits(s, 17, 2);
      int i = 19;
      long nanos = 0;
      if (i < n && s.charAt(i) == '.') {
        int start = ++i;
        while (i < n && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
          if (i - start < 9) {
            nanos = nanos * 10 + (s.charAt(i) - '0');
          }
          i++;
        }
        for (int k = i - start; k < 9; k++) {
          nanos *= 10;
        }
        if (i == start) {
          year = -1;
        }
      }
      int offset = 0;
      if (i == n - 1 && (s.charAt(i) == 'Z' || s.charAt(i) == 'z')) {
        i = n;
      } else if (i == n - 6 && (s.charAt(i) == '+' || s.charAt(i) == '-') && s.charAt(i + 3) == ':') {
        int oh = digits(s, i + 1, 2);
        int om = digits(s, i + 4, 2);
        offset = oh < 0 || om < 0 || oh > 18 || om > 59 ? -1 : (oh * 3600 + om * 60) * (s.charAt(i) == '-' ? -1 : 1);
        i = oh < 0 || om < 0 || oh > 18 || om > 59 ? -1 : n;
      }
      if (i == n && year >= 0 && month >= 1 && month <= 12 && day >= 1 && hour >= 0 && hour <= 23 && minute >= 0
          && minute <= 59 && second >= 0 && second <= 59 && day <= java.time.YearMonth.of(year, month).lengthOfMonth()) {
        long epochDay = java.time.LocalDate.of(year, month, day).toEpochDay();
        return Instant.ofEpochSecond(epochDay * 86400 + hour * 3600L + minute * 60L + second - offset, nanos);
      }
    }
    return OffsetDateTime.parse(s).toInstant();
  }

  /** The {@code count} decimal digits of {@code s} at {@code at}, or -1 when they are not all digits. */
  private static int digits(String s, int at, int count) {
    int v = 0;
    for (int i = at; i < at + count; i++) {
      char c = s.charAt(i);
      if (c < '0' || c > '9') {
        return -1;
      }
      v = v * 10 + (c - '0');
    }
    return v;
  }

  static final class Interner {
    private final Map<String, String> texts = new HashMap<>();
    private final Map<String, Digest> digests = new HashMap<>();
    private final Map<String, Instant> times = new HashMap<>();

    String text(String s) {
      return s == null || s.isEmpty() ? "" : texts.computeIfAbsent(s, k -> k);
    }

    /** The digest of {@code text}; only the last few thousand are remembered (chunk digests are mostly unique). */
    Digest digest(String text) {
      Digest d = digests.get(text);
      if (d == null) {
        d = Digest.parse(text);
        if (digests.size() > 4096) {
          digests.clear();
        }
        digests.put(text, d);
      }
      return d;
    }

    Instant time(String text, Where where) throws LayerFormatException {
      Instant t = times.get(text);
      if (t == null) {
        try {
          t = rfc3339(text);
        } catch (DateTimeParseException e) {
          throw new LayerFormatException(where + ": modtime '" + text + "' is not RFC 3339", e);
        }
        if (times.size() > 4096) {
          times.clear();
        }
        times.put(text, t);
      }
      return t;
    }
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

  /** One entry under construction: its own fields taken at once (the JSON holder is refilled), chunks as they come. */
  private static final class Builder {
    final String name;
    final EntryType type;
    final long size;
    final List<LayerChunk> chunks = new ArrayList<>(1);
    private final int mode;
    private final int uid;
    private final int gid;
    private final String userName;
    private final String groupName;
    private final Instant modTime;
    private final String link;
    private final int devMajor;
    private final int devMinor;
    private final Map<String, byte[]> xattrs;
    private final Optional<Digest> fileDigest;
    private final Where where;
    // The file's stored frames [storedStart, storedEnd), when its entry gives an endOffset (containers/storage).
    private final long storedStart;
    private final long storedEnd;
    // One pass: chunks whose stored range's end a later start gives.
    private List<Pending> pending;

    Builder(String name, EntryType type, EntryJson json, Where at, Interner strings) throws LayerFormatException {
      this.name = name;
      this.type = type;
      this.size = json.size == null ? 0 : json.size;
      if (size < 0) {
        throw new LayerFormatException(at + " ('" + name + "') has negative size " + size);
      }
      Where w = at.named(name);
      this.where = w;
      try {
        fileDigest = json.digest == null || json.digest.isEmpty() ? Optional.empty()
            : Optional.of(strings.digest(json.digest));
      } catch (IllegalArgumentException ex) {
        throw new LayerFormatException(w + ": " + ex.getMessage(), ex);
      }
      Map<String, byte[]> x = Map.of();
      if (json.xattrs != null && !json.xattrs.isEmpty()) {
        x = new LinkedHashMap<>();
        for (Map.Entry<String, String> e : json.xattrs.entrySet()) {
          try {
            x.put(e.getKey(), Base64.getDecoder().decode(e.getValue() == null ? "" : e.getValue()));
          } catch (IllegalArgumentException ex) {
            throw new LayerFormatException(w + ": xattr '" + e.getKey() + "' is not base64", ex);
          }
        }
      }
      this.xattrs = x;
      String l = json.linkName == null ? "" : json.linkName;
      if (type == EntryType.HARDLINK) {
        l = EntryNames.clean(l, w.said(" hard link target"));
      } else if (type == EntryType.SYMLINK && l.isEmpty()) {
        throw new LayerFormatException(w + ": symlink without a target");
      }
      this.link = l;
      this.mode = (int) ((json.mode == null ? 0 : json.mode) & 07777);
      this.uid = id(json.uid, w);
      this.gid = id(json.gid, w);
      this.userName = strings.text(json.userName);
      this.groupName = strings.text(json.groupName);
      this.modTime = json.modtime == null || json.modtime.isEmpty() ? Instant.EPOCH : strings.time(json.modtime, w);
      this.devMajor = (int) (json.devMajor == null ? 0 : json.devMajor);
      this.devMinor = (int) (json.devMinor == null ? 0 : json.devMinor);
      if (json.endOffset != null && json.offset != null && json.endOffset <= json.offset) {
        throw new LayerFormatException(w + " has endOffset " + json.endOffset + " not after offset " + json.offset);
      }
      boolean framed = type == EntryType.REG && json.endOffset != null && json.offset != null && size > 0;
      this.storedStart = framed ? json.offset : -1;
      this.storedEnd = framed ? json.endOffset : -1;
    }

    /**
     * Adds the chunk {@code c} (the file's own entry, or one of its {@code chunk} entries) and finds where its stored
     * bytes end. Each chunk is a zstd frame or gzip member of its own, so it ends where the next stored chunk starts.
     * containers/storage's compressor writes {@code endOffset} on a file's first entry only, where it is the end of
     * the file's last frame: the file's chunks then end at the next start or there, whichever comes first. eStargz
     * and stargz-snapshotter's zstd:chunked write no {@code endOffset}; the next start is then the next file's (or the
     * TOC's). An {@code endOffset} on a chunk entry (flatpull's converter before it followed containers/storage) is
     * taken as written, inside the file's range.
     */
    void addChunk(EntryJson c, Where at, ChunkEnds ends, long dataEnd, FetchLimits limits, Interner strings)
        throws IOException {
      Where w = at.named(name);
      long fileOffset = c.chunkOffset == null ? 0 : c.chunkOffset;
      long chunkSize = c.chunkSize == null ? 0 : c.chunkSize;
      if (fileOffset < 0 || chunkSize < 0) {
        throw new LayerFormatException(w + " has negative chunkOffset or chunkSize");
      }
      if (chunkSize == 0) {
        chunkSize = size - fileOffset;
      }
      if (chunkSize <= 0 || fileOffset + chunkSize > size) {
        throw new LayerFormatException(
            w + ": chunk at " + fileOffset + " of size " + chunkSize + " lies outside the file size " + size);
      }
      if (chunkSize > limits.maxChunkBytes()) {
        throw new SizeLimitExceededException(w + " chunk", limits.maxChunkBytes());
      }
      long inner = c.innerOffset == null ? 0 : c.innerOffset;
      Digest digest;
      try {
        digest = c.chunkDigest != null && !c.chunkDigest.isEmpty() ? strings.digest(c.chunkDigest) : null;
      } catch (IllegalArgumentException ex) {
        throw new LayerFormatException(w + ": " + ex.getMessage(), ex);
      }
      if ("zeros".equals(c.chunkType)) {
        // Produced without a fetch, so its digest is all that vouches for it: it must be that of its zero bytes.
        if (digest == null || !digest.equals(ZeroRuns.digest(digest.algorithm(), chunkSize))) {
          throw new LayerFormatException(w + ": zeros chunk at " + fileOffset + " has digest " + c.chunkDigest
              + ", not that of " + chunkSize + " zero bytes");
        }
        chunks.add(new LayerChunk(fileOffset, chunkSize, new ByteRange(0, 0), 0, null));
        return;
      }
      if (c.chunkType != null && !c.chunkType.isEmpty()) {
        throw new LayerFormatException(w + ": chunk at " + fileOffset + " has unknown chunkType '" + c.chunkType + "'");
      }
      if (c.offset == null || c.offset < 0 || inner < 0) {
        throw new LayerFormatException(w + " has a missing or negative offset");
      }
      long start = c.offset;
      long end;
      if (c.endOffset != null && !c.type.equals("reg")) {
        end = c.endOffset;
      } else {
        end = ends.after(start);
        if (end < 0) {
          if (pending == null) {
            pending = new ArrayList<>(1);
          }
          pending.add(new Pending(fileOffset, chunkSize, start, inner, digest, w));
          return;
        }
        if (storedEnd >= 0) {
          end = Math.min(end, storedEnd);
        }
      }
      place(fileOffset, chunkSize, start, end, inner, digest, w, dataEnd, limits);
    }

    /** A chunk whose stored range's end is not known yet. */
    private record Pending(long fileOffset, long chunkSize, long start, long inner, Digest digest, Where where) {}

    /** Whether a chunk of the file waits for its end. */
    boolean waits() {
      return pending != null && !pending.isEmpty();
    }

    /** The chunks that wait end at {@code next} (or where the file's frames end, when sooner). */
    void resolve(long next, long dataEnd, FetchLimits limits) throws IOException {
      if (!waits()) {
        return;
      }
      for (Pending p : pending) {
        place(p.fileOffset(), p.chunkSize(), p.start(), storedEnd >= 0 ? Math.min(next, storedEnd) : next, p.inner(),
            p.digest(), p.where(), dataEnd, limits);
      }
      pending.clear();
    }

    private void place(long fileOffset, long chunkSize, long start, long end, long inner, Digest digest, Where w,
        long dataEnd, FetchLimits limits) throws IOException {
      if (start >= dataEnd || end > dataEnd) {
        throw new LayerFormatException(
            w + ": stored range [" + start + ", " + end + ") lies outside the blob's data area [0, " + dataEnd + ")");
      }
      if (storedEnd >= 0 && (start < storedStart || start >= storedEnd || end > storedEnd)) {
        throw new LayerFormatException(w + ": chunk at " + fileOffset + " is stored at offset " + start
            + ", outside its file's frames [" + storedStart + ", " + storedEnd + ")");
      }
      if (end <= start) {
        throw new LayerFormatException(w + ": chunk at " + fileOffset + " has endOffset " + end + " not after offset " + start);
      }
      if (end - start > limits.maxChunkBytes() + 65536L) {
        throw new SizeLimitExceededException(w + " stored chunk", limits.maxChunkBytes());
      }
      chunks.add(new LayerChunk(fileOffset, chunkSize, ByteRange.between(start, end), inner, digest));
    }

    /** The blob range of the file's frames, when its entry bounds them with an endOffset. */
    Optional<ByteRange> frames() {
      return storedEnd < 0 ? Optional.empty() : Optional.of(ByteRange.between(storedStart, storedEnd));
    }

    /** The least start greater than {@code offset} among the sorted {@code starts}, else {@code dataEnd}. */
    private static long higher(long[] starts, long offset, long dataEnd) {
      int i = java.util.Arrays.binarySearch(starts, offset);
      int next = i >= 0 ? i + 1 : -i - 1;
      while (next < starts.length && starts[next] <= offset) {
        next++;
      }
      return next < starts.length ? starts[next] : dataEnd;
    }

    LayerEntry build(String layer) throws LayerFormatException {
      Where at = where;
      List<LayerChunk> ordered = new ArrayList<>(chunks);
      ordered.sort((a, b) -> Long.compare(a.fileOffset(), b.fileOffset()));
      long expect = 0;
      for (int i = 0; i < ordered.size(); i++) {
        LayerChunk c = ordered.get(i);
        if (c.fileOffset() != expect) {
          throw new LayerFormatException(at + ": chunks leave a gap or overlap at file offset " + expect);
        }
        // A zstd:chunked main entry may span all of the file's frames; its own chunk ends where the next one starts.
        if (i + 1 < ordered.size() && c.storedLength() != 0) {
          LayerChunk next = ordered.get(i + 1);
          if (next.storedLength() != 0 && next.storedOffset() > c.storedOffset() && next.storedOffset() < c.storedEnd()) {
            c = new LayerChunk(c.fileOffset(), c.size(), ByteRange.between(c.storedOffset(), next.storedOffset()), c.innerOffset(), c.digest());
          }
        }
        if (c.digest() == null && c.storedLength() != 0) {
          if (ordered.size() == 1 && fileDigest.isPresent()) {
            c = new LayerChunk(c.fileOffset(), c.size(), c.stored(), c.innerOffset(), fileDigest.get());
          } else {
            throw new LayerFormatException(at + ": chunk at file offset " + c.fileOffset() + " has no digest to verify it");
          }
        }
        ordered.set(i, c);
        expect = c.fileEnd();
      }
      if (type == EntryType.REG && expect != size) {
        throw new LayerFormatException(at + ": chunks cover " + expect + " of " + size + " bytes");
      }
      return new LayerEntry(name, type, type == EntryType.REG ? size : 0, mode, uid, gid, userName, groupName, modTime,
          link, devMajor, devMinor, xattrs, fileDigest, type == EntryType.REG ? ordered : List.of());
    }

    private static int id(Long v, Where where) throws LayerFormatException {
      if (v == null) {
        return 0;
      }
      if (v < 0 || v > 0xFFFF_FFFFL) {
        throw new LayerFormatException(where + ": uid/gid " + v + " out of range");
      }
      return (int) (long) v;
    }
  }
}
