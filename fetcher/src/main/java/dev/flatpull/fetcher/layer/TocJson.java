package dev.flatpull.fetcher.layer;

import dev.flatpull.core.SizeLimitExceededException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A TOC's JSON read from the bytes that hold it (UTF-8, RFC 8259's grammar, nothing more lenient), straight into the
 * fields {@link TocParser} uses: the walk {@code TocParser} makes with Jackson's token parser over a streamed TOC,
 * with the same refusals, for the TOCs held in memory (all but the largest).
 *
 * <p>Why a reader of its own: the FUSE manager runs with C1 alone, where Jackson's parser (general, and many calls
 * deep per token) was most of a TOC's parse on the mount's critical path: 89 ms for the Debian + python3 layer (8,350
 * entries, 5.8 MB of JSON), of which 60 ms in the pass that builds the index. This reader makes a string only of the
 * values the index keeps (field names are matched as bytes), in loops a C1 method holds whole. Its equivalence with
 * the Jackson walk is what {@code TocJsonTest} checks, on valid and on broken TOCs.
 */
final class TocJson {
  /** The deepest nesting skipped in fields flatpull does not read (Jackson's default limit: 1,000 in all). */
  static final int MAX_DEPTH = 1000;
  /** The longest number read (Jackson's default limit). */
  static final int MAX_NUMBER_LENGTH = 1000;

  /** What a document holds, as it is read. */
  interface Document {
    /** The version: null when the JSON says null, -1 when it is not an integer. */
    void version(Integer v);

    void tarSplitDigest(String text);

    /** The document has an entries array. */
    void entries();

    /** The entry numbered {@code i}, in {@code e} (refilled for every entry). */
    void entry(int i, TocParser.EntryJson e) throws IOException;

    /** The entries array ended after {@code count} entries. */
    void entriesEnd(int count);
  }

  private static final int NAME = 0, TYPE = 1, SIZE = 2, MODTIME = 3, LINK_NAME = 4, MODE = 5, UID = 6, GID = 7,
      USER_NAME = 8, GROUP_NAME = 9, DEV_MAJOR = 10, DEV_MINOR = 11, DIGEST = 12, OFFSET = 13, END_OFFSET = 14,
      CHUNK_OFFSET = 15, CHUNK_SIZE = 16, CHUNK_DIGEST = 17, INNER_OFFSET = 18, CHUNK_TYPE = 19, XATTRS = 20,
      VERSION = 21, TAR_SPLIT_DIGEST = 22, ENTRIES = 23, OTHER = -1;
  private static final String[] FIELDS = {"name", "type", "size", "modtime", "linkName", "mode", "uid", "gid",
      "userName", "groupName", "devMajor", "devMinor", "digest", "offset", "endOffset", "chunkOffset", "chunkSize",
      "chunkDigest", "innerOffset", "chunkType", "xattrs", "version", "tarSplitDigest", "entries"};
  private static final byte[][] FIELD_BYTES = new byte[FIELDS.length][];
  /** The entry types a TOC names, as constants: most entries' type is one of them. */
  private static final String[] TYPES = {"reg", "dir", "chunk", "symlink", "hardlink", "char", "block", "fifo"};
  private static final byte[][] TYPE_BYTES = new byte[TYPES.length][];

  /** Field numbers by {@link #shape}: each name's shape is its own, so that a name is one comparison away. */
  private static final int[] BY_SHAPE = new int[1024];

  static {
    java.util.Arrays.fill(BY_SHAPE, OTHER);
    for (int k = 0; k < FIELDS.length; k++) {
      FIELD_BYTES[k] = FIELDS[k].getBytes(StandardCharsets.US_ASCII);
      int shape = shape(FIELD_BYTES[k], 0, FIELD_BYTES[k].length);
      if (BY_SHAPE[shape] != OTHER) {
        throw new IllegalStateException("fields " + FIELDS[BY_SHAPE[shape]] + " and " + FIELDS[k] + " share a shape");
      }
      BY_SHAPE[shape] = k;
    }
    for (int k = 0; k < TYPES.length; k++) {
      TYPE_BYTES[k] = TYPES[k].getBytes(StandardCharsets.US_ASCII);
    }
  }

  /** A name's length and four of its bytes, in 10 bits (distinct for every field: checked when the class loads). */
  private static int shape(byte[] b, int from, int length) {
    return (length + b[from] + b[from + (length >> 1)] + b[from + Math.max(0, length - 2)] * 6 + b[from + length - 1])
        & 1023;
  }

  private final byte[] b;
  private final String layer;
  private int i;
  // Where the last string read or skipped lies, and whether it is plain (no escape, no byte above 127): then its
  // bytes are its text.
  private int from;
  private int to;
  private boolean plain;

  private TocJson(byte[] json, String layer) {
    this.b = json;
    this.layer = layer;
  }

  /**
   * Reads {@code json}, telling {@code d} what it holds; with {@code survey}, an entry's fields other than its type
   * and offset are skipped, not read.
   */
  static void read(byte[] json, String layer, boolean survey, long maxEntries, Document d) throws IOException {
    new TocJson(json, layer).document(survey, maxEntries, d);
  }

  private void document(boolean survey, long maxEntries, Document d) throws IOException {
    if (b.length >= 3 && b[0] == (byte) 0xef && b[1] == (byte) 0xbb && b[2] == (byte) 0xbf) {
      i = 3; // a byte-order mark, as Jackson skips it
    }
    int c = ws();
    if (c != '{') {
      valueStart(c);
      if (c == '-' || (c >= '0' && c <= '9')) {
        number();
        int after = ws();
        if (after >= 0 && i == to) {
          throw unexpected(after, "a space after a number at the top level");
        }
      } else if (c == 't' || c == 'f' || c == 'n') {
        literal(c == 't' ? "true" : c == 'f' ? "false" : "null");
      }
      throw new LayerFormatException(layer + ": TOC version is null, expected 1");
    }
    TocParser.EntryJson e = new TocParser.EntryJson();
    if (closed('}')) {
      return;
    }
    c = ws();
    while (true) {
      int field = key(c);
      int v = ws();
      if (field == VERSION) {
        if (v == 'n') {
          literal("null");
          d.version(null);
        } else if (v == '-' || (v >= '0' && v <= '9')) {
          boolean integer = number();
          long n = integer ? integer(from, to) : 0;
          if (integer && (n < Integer.MIN_VALUE || n > Integer.MAX_VALUE)) {
            throw invalid("version " + text(from, to) + " is out of the range of an int");
          }
          d.version(integer ? (int) n : -1);
        } else {
          skip(0);
          d.version(-1);
        }
      } else if (field == TAR_SPLIT_DIGEST) {
        d.tarSplitDigest(text(new TocParser.Where(layer, -1, null), "tarSplitDigest"));
      } else if (field == ENTRIES) {
        if (v == 'n') {
          literal("null");
        } else if (v != '[') {
          valueStart(v);
          throw new LayerFormatException(layer + ": TOC entries is not an array");
        } else {
          d.entries();
          d.entriesEnd(entries(survey, maxEntries, d, e));
        }
      } else {
        skip(0);
      }
      if (!more('}')) {
        return;
      }
      c = ws();
    }
  }

  private int entries(boolean survey, long maxEntries, Document d, TocParser.EntryJson e) throws IOException {
    if (closed(']')) {
      return 0;
    }
    int c = ws();
    int n = 0;
    while (true) {
      TocParser.Where where = new TocParser.Where(layer, n, null);
      if (c == 'n') {
        literal("null");
        throw new LayerFormatException(where + " has no type");
      }
      if (c != '{') {
        valueStart(c);
        throw new LayerFormatException(where + " is not an object");
      }
      if (n >= maxEntries) {
        throw new SizeLimitExceededException(layer + ": TOC entry count " + (n + 1) + "+", maxEntries);
      }
      entry(e, where, survey);
      d.entry(n, e);
      n++;
      if (!more(']')) {
        return n;
      }
      c = ws();
    }
  }

  /** One entry object into {@code e}; {@code i} is on its '{'. */
  private void entry(TocParser.EntryJson e, TocParser.Where where, boolean survey) throws IOException {
    e.clear();
    if (closed('}')) {
      return;
    }
    int c = ws();
    while (true) {
      int field = key(c);
      if (survey && field != TYPE && field != OFFSET) {
        field = OTHER;
      }
      switch (field) {
        case NAME -> e.name = text(where, "name");
        case TYPE -> e.type = type(where);
        case SIZE -> e.size = number(where, "size");
        case MODTIME -> e.modtime = repeated(where, "modtime", TIMES);
        case LINK_NAME -> e.linkName = text(where, "linkName");
        case MODE -> e.mode = number(where, "mode");
        case UID -> e.uid = number(where, "uid");
        case GID -> e.gid = number(where, "gid");
        case USER_NAME -> e.userName = repeated(where, "userName", USERS);
        case GROUP_NAME -> e.groupName = repeated(where, "groupName", GROUPS);
        case DEV_MAJOR -> e.devMajor = number(where, "devMajor");
        case DEV_MINOR -> e.devMinor = number(where, "devMinor");
        case DIGEST -> e.digest = repeated(where, "digest", DIGESTS);
        case OFFSET -> e.offset = number(where, "offset");
        case END_OFFSET -> e.endOffset = number(where, "endOffset");
        case CHUNK_OFFSET -> e.chunkOffset = number(where, "chunkOffset");
        case CHUNK_SIZE -> e.chunkSize = number(where, "chunkSize");
        case CHUNK_DIGEST -> e.chunkDigest = repeated(where, "chunkDigest", DIGESTS);
        case INNER_OFFSET -> e.innerOffset = number(where, "innerOffset");
        case CHUNK_TYPE -> e.chunkType = text(where, "chunkType");
        case XATTRS -> e.xattrs = xattrs(where);
        default -> skip(0);
      }
      if (!more('}')) {
        return;
      }
      c = ws();
    }
  }

  /** A field's name, matched against {@link #FIELDS} ({@link #OTHER} when none), and the colon after it. */
  private int key(int c) throws IOException {
    if (c != '"') {
      throw unexpected(c, "a field name");
    }
    string();
    int field = OTHER;
    if (plain) {
      int n = to - from;
      if (n > 0) {
        int k = BY_SHAPE[shape(b, from, n)];
        if (k >= 0 && FIELD_BYTES[k].length == n && same(FIELD_BYTES[k])) {
          field = k;
        }
      }
    } else {
      String name = decoded();
      for (int k = 0; k < FIELDS.length; k++) {
        if (FIELDS[k].equals(name)) {
          field = k;
          break;
        }
      }
    }
    colon();
    return field;
  }

  /** Whether the last plain string's bytes are {@code expected}'s (of its length). */
  private boolean same(byte[] expected) {
    byte[] b = this.b;
    int f = from;
    for (int k = 0; k < expected.length; k++) {
      if (b[f + k] != expected[k]) {
        return false;
      }
    }
    return true;
  }

  // Values that repeat from one entry to the next (an owner; a time; a file's digest, which its one chunk's repeats):
  // the last of each kind, where its bytes lie, so that a repeat is the same string, neither made again nor hashed
  // again where the parser interns it.
  private static final int USERS = 0, GROUPS = 1, TIMES = 2, DIGESTS = 3;
  private final String[] lastText = new String[4];
  private final int[] lastFrom = new int[4];
  private final int[] lastTo = new int[4];

  /** {@link #text}, the same string as the last value of {@code kind} when its bytes are the same. */
  private String repeated(TocParser.Where where, String field, int kind) throws IOException {
    if (ws() != '"') {
      return text(where, field);
    }
    string();
    if (!plain) {
      return decoded();
    }
    int n = to - from;
    String last = lastText[kind];
    if (last != null && lastTo[kind] - lastFrom[kind] == n) {
      byte[] b = this.b;
      int f = from;
      int g = lastFrom[kind];
      int k = 0;
      while (k < n && b[f + k] == b[g + k]) {
        k++;
      }
      if (k == n) {
        return last;
      }
    }
    String s = new String(b, from, n, StandardCharsets.ISO_8859_1);
    lastText[kind] = s;
    lastFrom[kind] = from;
    lastTo[kind] = to;
    return s;
  }

  /** A text field's value: a string, or the text of a number or boolean (as Jackson's getValueAsString gives it). */
  private String text(TocParser.Where where, String field) throws IOException {
    int c = ws();
    switch (c) {
      case '"' -> {
        string();
        return plain ? new String(b, from, to - from, StandardCharsets.ISO_8859_1) : decoded();
      }
      case 'n' -> {
        literal("null");
        return null;
      }
      case 't' -> {
        literal("true");
        return "true";
      }
      case 'f' -> {
        literal("false");
        return "false";
      }
      case '{', '[' -> throw new LayerFormatException(where + ": field '" + field + "' is not a string");
      default -> {
        valueStart(c);
        number();
        return text(from, to);
      }
    }
  }

  /** The entry's type, one of {@link #TYPES} without a new string when it is. */
  private String type(TocParser.Where where) throws IOException {
    if (ws() == '"') {
      string();
      if (plain) {
        int n = to - from;
        for (int k = 0; k < TYPE_BYTES.length; k++) {
          if (TYPE_BYTES[k].length == n && same(TYPE_BYTES[k])) {
            return TYPES[k];
          }
        }
        return new String(b, from, n, StandardCharsets.ISO_8859_1);
      }
      return decoded();
    }
    return text(where, "type");
  }

  /** A number field's value: a number (a fraction cut off), or a string holding an integer. */
  private Long number(TocParser.Where where, String field) throws IOException {
    int c = ws();
    switch (c) {
      case 'n' -> {
        literal("null");
        return null;
      }
      case '"' -> {
        string();
        String s = plain ? new String(b, from, to - from, StandardCharsets.ISO_8859_1) : decoded();
        try {
          return Long.parseLong(s.trim());
        } catch (NumberFormatException ex) {
          throw new LayerFormatException(where + ": field '" + field + "' is not a number: '" + s + "'");
        }
      }
      case '{', '[' -> throw new LayerFormatException(where + ": field '" + field + "' is not a number");
      case 't', 'f' -> {
        literal(c == 't' ? "true" : "false");
        throw new LayerFormatException(where + ": field '" + field + "' is not a number");
      }
      default -> {
        valueStart(c);
        if (number()) {
          return integer(from, to);
        }
        double v = Double.parseDouble(text(from, to));
        if (!(v >= -9.223372036854775808E18 && v <= 9.223372036854775807E18)) {
          throw invalid("number " + text(from, to) + " is out of the range of a long");
        }
        return (long) v;
      }
    }
  }

  private Map<String, String> xattrs(TocParser.Where where) throws IOException {
    int c = ws();
    if (c == 'n') {
      literal("null");
      return null;
    }
    if (c != '{') {
      valueStart(c);
      throw new LayerFormatException(where + ": field 'xattrs' is not an object");
    }
    Map<String, String> m = new LinkedHashMap<>();
    if (closed('}')) {
      return m;
    }
    c = ws();
    while (true) {
      if (c != '"') {
        throw unexpected(c, "a field name");
      }
      string();
      String k = plain ? new String(b, from, to - from, StandardCharsets.ISO_8859_1) : decoded();
      colon();
      m.put(k, text(where, "xattrs." + k));
      if (!more('}')) {
        return m;
      }
      c = ws();
    }
  }

  /** The ':' after a field's name. */
  private void colon() throws LayerFormatException {
    int c = ws();
    if (c != ':') {
      throw unexpected(c, "':'");
    }
    i++;
  }

  /** Reads the '{' or '[' at {@code i}: true when {@code close} follows at once (read too), an empty container. */
  private boolean closed(char close) {
    i++;
    if (ws() == close) {
      i++;
      return true;
    }
    return false;
  }

  /** After a member or an element: true when a ',' follows, false when {@code close} does (either read). */
  private boolean more(char close) throws LayerFormatException {
    int c = ws();
    if (c == ',') {
      i++;
      return true;
    }
    if (c == close) {
      i++;
      return false;
    }
    throw unexpected(c, "',' or '" + close + "'");
  }

  /** Skips any value, checking its syntax. */
  private void skip(int depth) throws IOException {
    if (depth > MAX_DEPTH) {
      throw invalid("nesting deeper than " + MAX_DEPTH);
    }
    int c = ws();
    switch (c) {
      case '"' -> {
        string();
        if (!plain) {
          decoded(); // its escapes and UTF-8 are checked even unread
        }
      }
      case 'n' -> literal("null");
      case 't' -> literal("true");
      case 'f' -> literal("false");
      case '{' -> {
        if (closed('}')) {
          return;
        }
        c = ws();
        while (true) {
          if (c != '"') {
            throw unexpected(c, "a field name");
          }
          skip(depth + 1);
          colon();
          skip(depth + 1);
          if (!more('}')) {
            return;
          }
          c = ws();
        }
      }
      case '[' -> {
        if (closed(']')) {
          return;
        }
        while (true) {
          skip(depth + 1);
          if (!more(']')) {
            return;
          }
        }
      }
      default -> {
        valueStart(c);
        number();
      }
    }
  }

  /** The next byte that is not JSON whitespace (not consumed), or -1 at the end. */
  private int ws() {
    byte[] b = this.b;
    int k = i;
    while (k < b.length) {
      byte c = b[k];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
        i = k;
        return c & 0xff;
      }
      k++;
    }
    i = k;
    return -1;
  }

  /** Refuses {@code c} where a value must start. */
  private void valueStart(int c) throws LayerFormatException {
    if (c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n' || c == '-' || (c >= '0' && c <= '9')) {
      return;
    }
    throw unexpected(c, "a value");
  }

  /** Reads the literal {@code word} at {@code i}. */
  private void literal(String word) throws LayerFormatException {
    for (int k = 0; k < word.length(); k++) {
      if (i + k >= b.length || b[i + k] != word.charAt(k)) {
        throw invalid(i + k >= b.length ? "unexpected end of the document" : "unrecognized token at byte " + i
            + " (expected '" + word + "')");
      }
    }
    i += word.length();
    if (i < b.length && (Character.isLetterOrDigit(b[i]) || b[i] == '_')) {
      throw invalid("unrecognized token at byte " + (i - word.length()));
    }
  }

  /**
   * Reads a number at {@code i} into [{@link #from}, {@link #to}): true when it is an integer (no fraction or
   * exponent).
   */
  private boolean number() throws LayerFormatException {
    byte[] b = this.b;
    int n = b.length;
    int start = i;
    int k = start;
    if (k < n && b[k] == '-') {
      k++;
    }
    if (k >= n) {
      throw invalid("unexpected end of the document");
    }
    if (b[k] == '0') {
      k++;
      if (k < n && b[k] >= '0' && b[k] <= '9') {
        throw invalid("leading zeroes are not allowed (byte " + start + ")");
      }
    } else if (b[k] >= '1' && b[k] <= '9') {
      while (k < n && b[k] >= '0' && b[k] <= '9') {
        k++;
      }
    } else {
      throw invalid("a number without digits at byte " + start);
    }
    boolean integer = true;
    if (k < n && b[k] == '.') {
      integer = false;
      k++;
      int digits = k;
      while (k < n && b[k] >= '0' && b[k] <= '9') {
        k++;
      }
      if (k == digits) {
        throw invalid("a fraction without digits at byte " + start);
      }
    }
    if (k < n && (b[k] == 'e' || b[k] == 'E')) {
      integer = false;
      k++;
      if (k < n && (b[k] == '+' || b[k] == '-')) {
        k++;
      }
      int digits = k;
      while (k < n && b[k] >= '0' && b[k] <= '9') {
        k++;
      }
      if (k == digits) {
        throw invalid("an exponent without digits at byte " + start);
      }
    }
    if (k - start > MAX_NUMBER_LENGTH) {
      throw invalid("a number longer than " + MAX_NUMBER_LENGTH + " characters at byte " + start);
    }
    from = start;
    to = k;
    i = k;
    return integer;
  }

  /** The integer written in [{@code f}, {@code t}), checked against a long's range. */
  private long integer(int f, int t) throws LayerFormatException {
    boolean negative = b[f] == '-';
    long v = 0;
    for (int k = negative ? f + 1 : f; k < t; k++) {
      int d = b[k] - '0';
      // Accumulated below zero, where a long reaches one further.
      if (v < (Long.MIN_VALUE + d) / 10) {
        throw invalid("number " + text(f, t) + " is out of the range of a long");
      }
      v = v * 10 - d;
    }
    if (!negative) {
      if (v == Long.MIN_VALUE) {
        throw invalid("number " + text(f, t) + " is out of the range of a long");
      }
      v = -v;
    }
    return v;
  }

  private String text(int f, int t) {
    return new String(b, f, t - f, StandardCharsets.ISO_8859_1);
  }

  /**
   * Reads a string at {@code i} (on its quote) to after its closing quote: its bytes are [{@link #from},
   * {@link #to}), {@link #plain} when they are its text.
   */
  private void string() throws LayerFormatException {
    // Locals, not fields, in the loops: C1 loads and stores a field on every pass.
    byte[] b = this.b;
    int n = b.length;
    int start = i + 1;
    int k = start;
    boolean simple = true;
    while (true) {
      if (k >= n) {
        throw invalid("unexpected end of the document inside a string (byte " + (start - 1) + ")");
      }
      byte c = b[k];
      if (c == '"') {
        break;
      }
      if (c == '\\') {
        simple = false;
        k += 2; // the escaped character, checked when decoded
        continue;
      }
      if (c < 0x20) {
        if (c >= 0) {
          throw invalid("a control character (" + c + ") in a string at byte " + k + " must be escaped");
        }
        simple = false;
      }
      k++;
    }
    from = start;
    to = k;
    plain = simple;
    i = k + 1;
  }

  /** The text of the last string read that is not plain: escapes decoded, UTF-8 checked. */
  private String decoded() throws LayerFormatException {
    StringBuilder out = new StringBuilder(to - from);
    int k = from;
    while (k < to) {
      byte c = b[k];
      if (c == '\\') {
        if (k + 1 >= to) {
          throw invalid("an escape at the end of a string at byte " + k);
        }
        byte x = b[k + 1];
        switch (x) {
          case '"', '\\', '/' -> out.append((char) x);
          case 'b' -> out.append('\b');
          case 'f' -> out.append('\f');
          case 'n' -> out.append('\n');
          case 'r' -> out.append('\r');
          case 't' -> out.append('\t');
          case 'u' -> {
            if (k + 6 > to) {
              throw invalid("a \\u escape without four hex digits at byte " + k);
            }
            int v = 0;
            for (int h = k + 2; h < k + 6; h++) {
              int d = Character.digit(b[h], 16);
              if (d < 0) {
                throw invalid("a \\u escape without four hex digits at byte " + k);
              }
              v = v * 16 + d;
            }
            out.append((char) v);
            k += 4;
          }
          default -> throw invalid("an unrecognized escape '\\" + (char) (x & 0xff) + "' at byte " + k);
        }
        k += 2;
      } else if (c < 0) {
        // Every byte of a multi-byte UTF-8 sequence is above 127: a run of them decodes on its own.
        int run = k;
        while (k < to && b[k] < 0) {
          k++;
        }
        try {
          out.append(StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(b, run, k - run)));
        } catch (CharacterCodingException ex) {
          throw invalid("invalid UTF-8 in a string at byte " + run);
        }
      } else {
        out.append((char) c);
        k++;
      }
    }
    return out.toString();
  }

  private LayerFormatException unexpected(int c, String expected) {
    return invalid(c < 0 ? "unexpected end of the document"
        : "unexpected character " + (c >= 0x20 && c < 0x7f ? "'" + (char) c + "'" : "(" + c + ")") + " at byte " + i
            + ", expected " + expected);
  }

  private LayerFormatException invalid(String why) {
    return new LayerFormatException(layer + ": TOC is not valid JSON: " + why);
  }
}
