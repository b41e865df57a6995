package dev.flatpull.fetcher.layer;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.tar.TarReader.TarFormatException;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarReader;
import java.io.IOException;
import java.io.InputStream;
import java.security.MessageDigest;
import java.time.temporal.ChronoUnit;
import java.util.Arrays;
import java.util.Map;

/**
 * A zstd:chunked layer's tar-split (vbatts/tar-split's JSON lines: {@code type 2} segments hold the tar's own bytes,
 * headers and padding; {@code type 1} entries stand for a file's content by name and size), which lets the tar stream
 * be rebuilt from the layer's files. containers/storage uses the TOC to create files and the tar-split to export them,
 * so before a partial pull it checks that both describe the same entries; flatpull does the same before mounting, so
 * that what a container sees is what an ordinary pull of the layer would unpack.
 */
public final class TarSplit {
  private static final JsonFactory JSON_FACTORY = JsonFactory.builder().build();

  private TarSplit() {}

  /** Reads a regular file's content (verified, from wherever it is local). */
  @FunctionalInterface
  public interface Content {
    /** Up to {@code length} bytes of {@code file} at {@code offset} into {@code dst}; how many, or -1 at its end. */
    int read(LayerEntry file, long offset, byte[] dst, int length) throws IOException;
  }

  /**
   * The digest of the tar stream {@code lines} describes, each file's content read through {@code content} and
   * checked to have the size the tar-split gives it: the layer's diff_id, without the layer's compressed bytes.
   */
  static Digest rebuiltDigest(byte[] compressed, long length, LayerIndex index, Content content) throws IOException {
    String layer = "layer " + index.blob();
    MessageDigest md = Digest.newMessageDigest("sha256");
    byte[] buf = new byte[1 << 20];
    try (Lines in = new Lines(compressed, length, layer)) {
      while (in.next()) {
        if (in.type == Lines.SEGMENT) {
          md.update(in.bytes(), 0, in.length());
          continue;
        }
        long size = in.size;
        if (size == 0) {
          continue;
        }
        String name = EntryNames.clean(in.name == null ? "" : in.name, layer + ": tar-split");
        LayerEntry e = index.entry(name).map(index::contentOf)
            .orElseThrow(() -> new LayerFormatException(layer + ": tar-split file '" + name + "' is not in the TOC"));
        if (e.size() != size) {
          throw new LayerFormatException(layer + ": tar-split gives '" + name + "' " + size + " bytes, the TOC " + e.size());
        }
        for (long off = 0; off < size; ) {
          int n = content.read(e, off, buf, (int) Math.min(buf.length, size - off));
          if (n <= 0) {
            throw new java.io.EOFException(layer + ": '" + name + "' ended after " + off + " of " + size + " bytes");
          }
          md.update(buf, 0, n);
          off += n;
        }
      }
    }
    return Digest.of("sha256", md);
  }

  /**
   * Checks that the tar headers in {@code lines} describe exactly the entries of {@code index}: the same names, each
   * with the same type, link target, mode, size, owner, modification time (to the second), device numbers and
   * extended attributes, as containers/storage's {@code ensureTOCMatchesTarSplit} does.
   */
  static void checkMatches(byte[] compressed, long length, LayerIndex index, String layer, FetchLimits limits)
      throws IOException {
    // The entries matched so far, by number: each is made from the index only when its header comes.
    java.util.BitSet matched = new java.util.BitSet(index.entryCount());
    long count = 0;
    TarHeader h;
    try (Lines parsed = new Lines(compressed, length, layer)) {
      TarReader tar = new TarReader(new Rebuilt(parsed));
      while ((h = tar.next()) != null) {
        if (++count > limits.maxTocEntries()) {
          throw new SizeLimitExceededException(layer + ": tar-split entry count", limits.maxTocEntries());
        }
        String where = layer + ": tar-split entry '" + h.name() + "'";
        String name = EntryNames.clean(h.name(), where);
        if (name.equals(LayerIndex.PREFETCH_LANDMARK) || name.equals(LayerIndex.NO_PREFETCH_LANDMARK)) {
          continue;
        }
        int number = index.numberOf(name);
        if (number < 0 || matched.get(number)) {
          throw new LayerFormatException(where + " is missing from the TOC (or listed twice)");
        }
        matched.set(number);
        String mismatch = mismatch(index.entryAt(number), h, where);
        if (mismatch != null) {
          throw new LayerFormatException(layer + ": TOC and tar-split disagree about '" + name + "': " + mismatch);
        }
      }
    } catch (TarFormatException e) {
      throw new LayerFormatException(layer + ": tar-split does not rebuild a tar stream: " + e.getMessage(), e);
    }
    int missing = index.entryCount() - matched.cardinality();
    if (missing > 0) {
      String first = null;
      for (int i = matched.nextClearBit(0); i < index.entryCount(); i = matched.nextClearBit(i + 1)) {
        String n = index.nameAt(i);
        first = first == null || n.compareTo(first) < 0 ? n : first;
      }
      throw new LayerFormatException(layer + ": TOC entry '" + first + "' is missing from the tar-split (" + missing
          + " in all)");
    }
  }

  private static String mismatch(LayerEntry e, TarHeader h, String where) throws LayerFormatException {
    EntryType type = PlainLayerIndexer.typeOf(h, where);
    if (type != e.type()) {
      return "type " + e.type() + " against " + type;
    }
    String link = type == EntryType.HARDLINK ? EntryNames.clean(h.linkName(), where + " hard link") : h.linkName();
    if ((type == EntryType.HARDLINK || type == EntryType.SYMLINK) && !link.equals(e.linkName())) {
      return "link target '" + e.linkName() + "' against '" + link + "'";
    }
    if ((e.mode() & 07777) != (h.mode() & 07777)) {
      return "mode " + Integer.toOctalString(e.mode()) + " against " + Integer.toOctalString(h.mode());
    }
    long size = type == EntryType.REG ? h.size() : 0;
    if (size != e.size()) {
      return "size " + e.size() + " against " + size;
    }
    if (e.uid() != h.uid() || e.gid() != h.gid()) {
      return "owner " + e.uid() + ":" + e.gid() + " against " + h.uid() + ":" + h.gid();
    }
    // Tar headers carry seconds (the tar reader drops a PAX fraction); the TOC may carry nanoseconds.
    if (!e.modTime().truncatedTo(ChronoUnit.SECONDS).equals(h.modTime().truncatedTo(ChronoUnit.SECONDS))) {
      return "modification time " + e.modTime() + " against " + h.modTime();
    }
    if ((type == EntryType.CHAR || type == EntryType.BLOCK)
        && (e.devMajor() != h.devMajor() || e.devMinor() != h.devMinor())) {
      return "device " + e.devMajor() + "," + e.devMinor() + " against " + h.devMajor() + "," + h.devMinor();
    }
    if (!sameXattrs(e.xattrs(), h.xattrs())) {
      return "extended attributes " + e.xattrs().keySet() + " against " + h.xattrs().keySet();
    }
    return null;
  }

  private static boolean sameXattrs(Map<String, byte[]> a, Map<String, byte[]> b) {
    if (!a.keySet().equals(b.keySet())) {
      return false;
    }
    for (Map.Entry<String, byte[]> x : a.entrySet()) {
      if (!Arrays.equals(x.getValue(), b.get(x.getKey()))) {
        return false;
      }
    }
    return true;
  }

  /**
   * The lines of a tar-split, one after another, read by one streaming parser over the whole document (a layer has
   * tens of thousands): a segment's bytes are decoded into a buffer reused from line to line.
   */
  private static final class Lines implements AutoCloseable {
    static final int SEGMENT = 2;
    static final int FILE = 1;

    private final JsonParser parser;
    private final String layer;
    private final Segment segment = new Segment();
    int type;
    String name;
    long size;

    private final dev.flatpull.core.BoundedInputStream counted;
    private final long announced;

    /** The lines of a zstd-compressed tar-split that must decompress to exactly {@code announced} bytes. */
    Lines(byte[] compressed, long announced, String layer) throws IOException {
      this.counted = new dev.flatpull.core.BoundedInputStream(
          new com.github.luben.zstd.ZstdInputStream(new java.io.ByteArrayInputStream(compressed)),
          layer + ": tar-split", announced);
      this.announced = announced;
      this.parser = JSON_FACTORY.createParser(counted);
      this.layer = layer;
    }

    /** Moves to the next line; false at the end. */
    boolean next() throws IOException {
      try {
        JsonToken t = parser.nextToken();
        if (t == null) {
          if (counted.count() != announced) {
            throw new LayerFormatException(
                layer + ": tar-split decompresses to " + counted.count() + " bytes, the annotation says " + announced);
          }
          return false;
        }
        if (t != JsonToken.START_OBJECT) {
          throw new LayerFormatException(layer + ": tar-split line is not a JSON object");
        }
        type = -1;
        name = null;
        size = 0;
        segment.length = 0;
        while (parser.nextToken() == JsonToken.FIELD_NAME) {
          String field = parser.currentName();
          JsonToken v = parser.nextToken();
          switch (field) {
            case "type" -> type = parser.getValueAsInt(-1);
            case "name" -> name = v == JsonToken.VALUE_NULL ? null : parser.getValueAsString();
            case "size" -> size = parser.getValueAsLong(0);
            case "payload" -> {
              if (v == JsonToken.VALUE_STRING) {
                segment.length = 0;
                parser.readBinaryValue(segment);
              } else {
                parser.skipChildren();
              }
            }
            default -> parser.skipChildren();
          }
        }
      } catch (JsonProcessingException e) {
        throw new LayerFormatException(layer + ": tar-split is not valid JSON lines: " + e.getOriginalMessage(), e);
      } catch (SizeLimitExceededException e) {
        throw new LayerFormatException(layer + ": tar-split decompresses to more than the announced " + announced
            + " bytes", e);
      }
      if (type != SEGMENT && type != FILE) {
        throw new LayerFormatException(layer + ": tar-split line of unknown type " + type);
      }
      if (size < 0) {
        throw new LayerFormatException(layer + ": tar-split file entry with negative size " + size);
      }
      return true;
    }

    /** A segment line's bytes (a file line's payload is its checksum: not used). */
    byte[] bytes() {
      return segment.buf;
    }

    int length() {
      return type == SEGMENT ? segment.length : 0;
    }

    @Override
    public void close() throws IOException {
      parser.close();
    }
  }

  /** A growable buffer the parser decodes base64 into. */
  private static final class Segment extends java.io.OutputStream {
    byte[] buf = new byte[4096];
    int length;

    @Override
    public void write(int b) {
      ensure(1);
      buf[length++] = (byte) b;
    }

    @Override
    public void write(byte[] b, int off, int len) {
      ensure(len);
      System.arraycopy(b, off, buf, length, len);
      length += len;
    }

    private void ensure(int more) {
      if (length + more > buf.length) {
        buf = Arrays.copyOf(buf, Math.max(buf.length * 2, length + more));
      }
    }
  }

  /**
   * The tar stream a tar-split describes, with every file's content read as zeros and skipped without being made: the
   * headers are what the check needs.
   */
  private static final class Rebuilt extends InputStream {
    private final Lines lines;
    private int at;
    private int length;
    private long content;
    private boolean ended;

    Rebuilt(Lines lines) {
      this.lines = lines;
    }

    /** Moves to the next line with bytes to give; false at the end. */
    private boolean fill() throws IOException {
      while (at == length && content == 0) {
        if (ended || !lines.next()) {
          ended = true;
          return false;
        }
        at = 0;
        length = lines.length();
        content = lines.type == Lines.FILE ? lines.size : 0;
      }
      return true;
    }

    @Override
    public int read() throws IOException {
      byte[] one = new byte[1];
      return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (len == 0) {
        return 0;
      }
      if (!fill()) {
        return -1;
      }
      if (at < length) {
        int n = Math.min(len, length - at);
        System.arraycopy(lines.bytes(), at, b, off, n);
        at += n;
        return n;
      }
      int n = (int) Math.min(len, content);
      Arrays.fill(b, off, off + n, (byte) 0);
      content -= n;
      return n;
    }

    @Override
    public long skip(long n) throws IOException {
      if (n <= 0 || !fill()) {
        return 0;
      }
      if (at < length) {
        int s = (int) Math.min(n, length - at);
        at += s;
        return s;
      }
      long s = Math.min(n, content);
      content -= s;
      return s;
    }
  }
}
