package dev.flatpull.fetcher.layer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.core.SizeLimitExceededException;
import dev.flatpull.fetcher.tar.TarReader.TarFormatException;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarReader;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.temporal.ChronoUnit;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;

/**
 * A zstd:chunked layer's tar-split (vbatts/tar-split's JSON lines: {@code type 2} segments hold the tar's own bytes,
 * headers and padding; {@code type 1} entries stand for a file's content by name and size), which lets the tar stream
 * be rebuilt from the layer's files. containers/storage uses the TOC to create files and the tar-split to export them,
 * so before a partial pull it checks that both describe the same entries; flatpull does the same before mounting, so
 * that what a container sees is what an ordinary pull of the layer would unpack.
 */
public final class TarSplit {
  private static final ObjectMapper JSON = new ObjectMapper();

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
  static Digest rebuiltDigest(byte[] lines, LayerIndex index, Content content) throws IOException {
    String layer = "layer " + index.blob();
    MessageDigest md = Digest.newMessageDigest("sha256");
    byte[] buf = new byte[1 << 20];
    try (BufferedReader in = new BufferedReader(
        new InputStreamReader(new ByteArrayInputStream(lines), StandardCharsets.UTF_8))) {
      String line;
      while ((line = in.readLine()) != null) {
        if (line.isBlank()) {
          continue;
        }
        JsonNode n = JSON.readTree(line);
        if (n.path("type").asInt() == 2) {
          md.update(Base64.getDecoder().decode(Objects.requireNonNullElse(n.path("payload").textValue(), "")));
          continue;
        }
        long size = n.path("size").asLong(0);
        if (size == 0) {
          continue;
        }
        String name = EntryNames.clean(n.path("name").asText(""), layer + ": tar-split");
        LayerEntry e = index.entry(name).map(index::contentOf)
            .orElseThrow(() -> new LayerFormatException(layer + ": tar-split file '" + name + "' is not in the TOC"));
        if (e.size() != size) {
          throw new LayerFormatException(layer + ": tar-split gives '" + name + "' " + size + " bytes, the TOC " + e.size());
        }
        for (long off = 0; off < size; ) {
          int n2 = content.read(e, off, buf, (int) Math.min(buf.length, size - off));
          if (n2 <= 0) {
            throw new java.io.EOFException(layer + ": '" + name + "' ended after " + off + " of " + size + " bytes");
          }
          md.update(buf, 0, n2);
          off += n2;
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
  static void checkMatches(byte[] lines, LayerIndex index, String layer, FetchLimits limits) throws IOException {
    Map<String, LayerEntry> pending = new HashMap<>();
    for (LayerEntry e : index.entries()) {
      pending.put(e.name(), e);
    }
    TarReader tar = new TarReader(new Rebuilt(lines, layer));
    long count = 0;
    TarHeader h;
    try {
      while ((h = tar.next()) != null) {
        if (++count > limits.maxTocEntries()) {
          throw new SizeLimitExceededException(layer + ": tar-split entry count", limits.maxTocEntries());
        }
        String where = layer + ": tar-split entry '" + h.name() + "'";
        String name = EntryNames.clean(h.name(), where);
        if (name.equals(LayerIndex.PREFETCH_LANDMARK) || name.equals(LayerIndex.NO_PREFETCH_LANDMARK)) {
          continue;
        }
        LayerEntry e = pending.remove(name);
        if (e == null) {
          throw new LayerFormatException(where + " is missing from the TOC (or listed twice)");
        }
        String mismatch = mismatch(e, h, where);
        if (mismatch != null) {
          throw new LayerFormatException(layer + ": TOC and tar-split disagree about '" + name + "': " + mismatch);
        }
      }
    } catch (TarFormatException e) {
      throw new LayerFormatException(layer + ": tar-split does not rebuild a tar stream: " + e.getMessage(), e);
    }
    if (!pending.isEmpty()) {
      throw new LayerFormatException(layer + ": TOC entry '" + pending.keySet().stream().sorted().findFirst().get()
          + "' is missing from the tar-split (" + pending.size() + " in all)");
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
   * The tar stream a tar-split describes, with every file's content read as zeros and skipped without being made: the
   * headers are what the check needs.
   */
  private static final class Rebuilt extends InputStream {
    private final BufferedReader lines;
    private final String layer;
    private byte[] segment = new byte[0];
    private int at;
    private long content;
    private boolean ended;

    Rebuilt(byte[] json, String layer) {
      this.lines = new BufferedReader(new InputStreamReader(new ByteArrayInputStream(json), StandardCharsets.UTF_8));
      this.layer = layer;
    }

    /** Moves to the next line with bytes to give; false at the end. */
    private boolean fill() throws IOException {
      while (at == segment.length && content == 0) {
        if (ended) {
          return false;
        }
        String line = lines.readLine();
        if (line == null) {
          ended = true;
          return false;
        }
        if (line.isBlank()) {
          continue;
        }
        JsonNode n;
        try {
          n = JSON.readTree(line);
        } catch (IOException e) {
          throw new LayerFormatException(layer + ": tar-split line is not JSON: " + e.getMessage(), e);
        }
        int type = n.path("type").asInt(-1);
        if (type == 2) {
          try {
            segment = Base64.getDecoder().decode(Objects.requireNonNullElse(n.path("payload").textValue(), ""));
          } catch (IllegalArgumentException e) {
            throw new LayerFormatException(layer + ": tar-split segment is not base64", e);
          }
          at = 0;
        } else if (type == 1) {
          long size = n.path("size").asLong(0);
          if (size < 0) {
            throw new LayerFormatException(layer + ": tar-split file entry with negative size " + size);
          }
          content = size;
        } else {
          throw new LayerFormatException(layer + ": tar-split line of unknown type " + n.path("type"));
        }
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
      if (at < segment.length) {
        int n = Math.min(len, segment.length - at);
        System.arraycopy(segment, at, b, off, n);
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
      if (at < segment.length) {
        int s = (int) Math.min(n, segment.length - at);
        at += s;
        return s;
      }
      long s = Math.min(n, content);
      content -= s;
      return s;
    }
  }
}
