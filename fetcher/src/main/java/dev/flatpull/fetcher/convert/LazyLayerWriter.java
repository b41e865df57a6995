package dev.flatpull.fetcher.convert;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.github.luben.zstd.Zstd;
import com.github.luben.zstd.ZstdOutputStream;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.EstargzTail;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.ZstdChunkedToc;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarReader;
import dev.flatpull.fetcher.tar.TarWriter;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.zip.GZIPOutputStream;

/**
 * Writes a tar stream as an eStargz or zstd:chunked layer. Both formats share one structure, which this class owns:
 * every non-empty regular file's content starts a new gzip member or zstd frame, large files are split into chunks of
 * their own, tar headers and padding sit in members between them, and a JSON TOC records each chunk's stored offset
 * and digest. They differ in compressor, TOC fields, and trailer (eStargz: a TOC member and a 51-byte footer;
 * zstd:chunked: skippable frames holding the TOC, a tar-split, and a 72-byte footer, laid out as containers/storage
 * 1.54 and later write them; docs/formats.md says what differs).
 *
 * <p>Files named in {@code prioritized} come first (after their parent directories), followed in eStargz by the
 * {@code .prefetch.landmark}; without prioritized files an eStargz layer starts with {@code .no.prefetch.landmark}.
 */
public final class LazyLayerWriter {
  /**
   * 16 KiB, chosen by measurement (docs/benchmarks.md, "Chunk size"): a runtime image verifiable from the image's own
   * digests carries whole chunks, and at 16 KiB those cover a Python start-up's pages at 1.2x their size (2.2x at
   * ctr-remote's 4 MiB), for a TOC twice that of 64 KiB chunks and an image 3 % larger.
   */
  public static final long DEFAULT_CHUNK_SIZE = 16L << 10;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final DateTimeFormatter RFC3339 = DateTimeFormatter.ISO_INSTANT.withZone(ZoneOffset.UTC);
  private static final byte[] LANDMARK_CONTENT = {0x0f};
  /** containers/storage's holes threshold: the shortest run of zeros it marks as a {@code zeros} chunk. */
  private static final long ZEROS_CHUNK_MIN = 1 << 10;

  private final LayerFormat format;
  private final long chunkSize;
  private final int level;

  private CountingOutputStream raw;
  private OutputStream member;
  private final MessageDigest diff = Digest.newMessageDigest("sha256");
  private long uncompressed;
  private final ArrayNode tocEntries = JSON.createArrayNode();
  private int chunkCount;
  private final ByteArrayOutputStream segment = new ByteArrayOutputStream();
  private final ByteArrayOutputStream tarSplit = new ByteArrayOutputStream();
  private long tarSplitPosition;

  /**
   * @param format {@link LayerFormat#ESTARGZ} or {@link LayerFormat#ZSTD_CHUNKED}
   * @param chunkSize largest chunk of a file's content in one member/frame
   * @param level gzip level 1-9, or zstd level 1-19
   */
  public LazyLayerWriter(LayerFormat format, long chunkSize, int level) {
    if (format == LayerFormat.PLAIN) {
      throw new IllegalArgumentException("plain is not a lazy format");
    }
    if (chunkSize < 4096) {
      throw new IllegalArgumentException("chunk size must be at least 4096 bytes, got " + chunkSize);
    }
    this.format = format;
    this.chunkSize = chunkSize;
    this.level = level;
  }

  private record SourceEntry(TarHeader header, long dataOffset) {}

  /** What of a conversion is done: bytes of the source's file contents written, of {@code total}. */
  @FunctionalInterface
  public interface Written {
    void bytes(long done, long total);
  }

  /** Converts the uncompressed tar {@code sourceTar} into {@code out}. A writer instance is used once. */
  public ConvertedLayer write(Path sourceTar, Path out, List<String> prioritized) throws IOException {
    return write(sourceTar, out, prioritized, (done, total) -> {});
  }

  /** The same, telling {@code written} after each entry how much of the source's content is converted. */
  public ConvertedLayer write(Path sourceTar, Path out, List<String> prioritized, Written written) throws IOException {
    List<SourceEntry> source = scan(sourceTar);
    long total = 0;
    for (SourceEntry e : source) {
      total += e.header().size();
    }
    long done = 0;
    List<SourceEntry> first = prioritizedPrefix(source, prioritized);
    Set<SourceEntry> placed = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
    placed.addAll(first);
    try (FileChannel in = FileChannel.open(sourceTar, StandardOpenOption.READ);
        OutputStream file = new BufferedOutputStream(Files.newOutputStream(out), 1 << 16)) {
      raw = new CountingOutputStream(file);
      for (SourceEntry e : first) {
        writeEntry(e.header(), in, e.dataOffset(), null);
        written.bytes(done += e.header().size(), total);
      }
      if (format == LayerFormat.ESTARGZ) {
        writeLandmark(first.isEmpty() ? LayerIndex.NO_PREFETCH_LANDMARK : LayerIndex.PREFETCH_LANDMARK);
      }
      for (SourceEntry e : source) {
        if (!placed.contains(e)) {
          writeEntry(e.header(), in, e.dataOffset(), null);
          written.bytes(done += e.header().size(), total);
        }
      }
      ConvertedLayer result = format == LayerFormat.ESTARGZ ? finishEstargz(out) : finishZstdChunked(out);
      file.flush();
      return result;
    }
  }

  private static List<SourceEntry> scan(Path tar) throws IOException {
    List<SourceEntry> out = new ArrayList<>();
    try (InputStream in = new BufferedInputStream(Files.newInputStream(tar), 1 << 16)) {
      TarReader r = new TarReader(in);
      TarHeader h;
      while ((h = r.next()) != null) {
        out.add(new SourceEntry(h, r.dataOffset()));
      }
    }
    return out;
  }

  private static String clean(String name) {
    String n = name;
    while (n.startsWith("./") || n.startsWith("/")) {
      n = n.substring(n.startsWith("./") ? 2 : 1);
    }
    while (n.endsWith("/")) {
      n = n.substring(0, n.length() - 1);
    }
    return n;
  }

  /** The prioritized entries present in the layer, in list order, each after its not yet placed ancestor directories. */
  private static List<SourceEntry> prioritizedPrefix(List<SourceEntry> source, List<String> prioritized) {
    if (prioritized.isEmpty()) {
      return List.of();
    }
    Map<String, SourceEntry> byName = new LinkedHashMap<>();
    for (SourceEntry e : source) {
      byName.put(clean(e.header().name()), e);
    }
    List<SourceEntry> first = new ArrayList<>();
    Set<String> placed = new HashSet<>();
    for (String p : prioritized) {
      place(clean(p), byName, placed, first, 0);
    }
    return first;
  }

  /** Places an entry after its ancestors and, for a hard link, after its target, so unpackers can always follow. */
  private static void place(
      String name, Map<String, SourceEntry> byName, Set<String> placed, List<SourceEntry> first, int depth) {
    SourceEntry e = byName.get(name);
    if (e == null || placed.contains(name) || depth > 8) {
      return;
    }
    for (int slash = name.indexOf('/'); slash > 0; slash = name.indexOf('/', slash + 1)) {
      String ancestor = name.substring(0, slash);
      if (byName.containsKey(ancestor) && placed.add(ancestor)) {
        first.add(byName.get(ancestor));
      }
    }
    if (e.header().type() == TarHeader.HARDLINK) {
      place(clean(e.header().linkName()), byName, placed, first, depth + 1);
    }
    placed.add(name);
    first.add(e);
  }

  // --- the shared structure ---

  private void writeLandmark(String name) throws IOException {
    TarHeader h = TarHeader.regular(name, 1, 0644, java.time.Instant.EPOCH);
    writeEntry(h, null, 0, LANDMARK_CONTENT);
  }

  private void writeEntry(TarHeader h, FileChannel in, long dataOffset, byte[] inline) throws IOException {
    ByteArrayOutputStream header = new ByteArrayOutputStream(1024);
    TarWriter.writeHeader(header, h);
    writeSegment(header.toByteArray());
    ObjectNode entry = tocEntry(h);
    if (!h.isRegular() || h.size() == 0) {
      tarSplitFile(h.name(), 0, null);
      tocEntries.add(entry);
      return;
    }
    closeMember();
    InputStream data = inline != null
        ? new java.io.ByteArrayInputStream(inline)
        : Channels.newInputStream(in.position(dataOffset));
    MessageDigest whole = Digest.newMessageDigest("sha256");
    Crc64 crc = new Crc64();
    List<long[]> ranges = new ArrayList<>();
    List<Digest> digests = new ArrayList<>();
    byte[] buf = new byte[(int) Math.min(chunkSize, h.size())];
    for (long off = 0; off < h.size(); off += chunkSize) {
      int n = (int) Math.min(chunkSize, h.size() - off);
      if (data.readNBytes(buf, 0, n) != n) {
        throw new IOException("source tar ends inside '" + h.name() + "'");
      }
      long start = raw.count;
      openMember();
      writeUncompressed(buf, 0, n);
      closeMember();
      whole.update(buf, 0, n);
      crc.update(buf, 0, n);
      ranges.add(new long[] {start, raw.count, off, n, allZero(buf, n) ? 1 : 0});
      digests.add(Digest.sha256(buf, 0, n));
    }
    tarSplitFile(h.name(), h.size(), crc.sum());
    entry.put("digest", Digest.of("sha256", whole).toString());
    for (int i = 0; i < ranges.size(); i++) {
      long[] r = ranges.get(i);
      ObjectNode c = i == 0 ? entry : chunkEntry(h.name());
      c.put("offset", r[0]);
      // containers/storage: endOffset on the file's entry only (the end of its last frame), chunk fields on every
      // entry of a file of several chunks, and a chunk of at least 1 KiB of zeros marked as such.
      if (format == LayerFormat.ZSTD_CHUNKED && i == 0) {
        c.put("endOffset", ranges.get(ranges.size() - 1)[1]);
      }
      if (i > 0) {
        c.put("chunkOffset", r[2]);
      }
      if (ranges.size() > 1 && (format == LayerFormat.ZSTD_CHUNKED || i < ranges.size() - 1)) {
        c.put("chunkSize", r[3]);
      }
      c.put("chunkDigest", digests.get(i).toString());
      if (format == LayerFormat.ZSTD_CHUNKED && ranges.size() > 1 && r[4] == 1 && r[3] >= ZEROS_CHUNK_MIN) {
        c.put("chunkType", "zeros");
      }
      if (i > 0) {
        tocEntries.add(c);
      } else {
        tocEntries.add(entry);
      }
      chunkCount++;
    }
    int pad = (int) ((TarWriter.BLOCK - (h.size() % TarWriter.BLOCK)) % TarWriter.BLOCK);
    if (pad > 0) {
      writeSegment(new byte[pad]);
    }
  }

  private static boolean allZero(byte[] b, int n) {
    for (int i = 0; i < n; i++) {
      if (b[i] != 0) {
        return false;
      }
    }
    return true;
  }

  private ObjectNode tocEntry(TarHeader h) {
    ObjectNode e = JSON.createObjectNode();
    String type =
        switch (h.type()) {
          case TarHeader.DIR -> "dir";
          case TarHeader.SYMLINK -> "symlink";
          case TarHeader.HARDLINK -> "hardlink";
          case TarHeader.CHAR -> "char";
          case TarHeader.BLOCK -> "block";
          case TarHeader.FIFO -> "fifo";
          default -> "reg";
        };
    e.put("name", h.name());
    e.put("type", type);
    if (h.isRegular()) {
      e.put("size", h.size());
    }
    if (!h.linkName().isEmpty()) {
      e.put("linkName", h.linkName());
    }
    e.put("mode", h.mode());
    e.put("uid", h.uid());
    e.put("gid", h.gid());
    if (!h.userName().isEmpty()) {
      e.put("userName", h.userName());
    }
    if (!h.groupName().isEmpty()) {
      e.put("groupName", h.groupName());
    }
    e.put("modtime", RFC3339.format(h.modTime()));
    if (h.type() == TarHeader.CHAR || h.type() == TarHeader.BLOCK) {
      e.put("devMajor", h.devMajor());
      e.put("devMinor", h.devMinor());
    }
    if (!h.xattrs().isEmpty()) {
      ObjectNode x = e.putObject("xattrs");
      new java.util.TreeMap<>(h.xattrs()).forEach((k, v) -> x.put(k, Base64.getEncoder().encodeToString(v)));
    }
    return e;
  }

  private ObjectNode chunkEntry(String name) {
    ObjectNode c = JSON.createObjectNode();
    c.put("name", name);
    c.put("type", "chunk");
    return c;
  }

  /** Bytes that belong to the tar stream but not to a file's content: headers, padding, the end marker. */
  private void writeSegment(byte[] b) throws IOException {
    openMember();
    writeUncompressed(b, 0, b.length);
    segment.writeBytes(b);
  }

  private void writeUncompressed(byte[] b, int off, int len) throws IOException {
    member.write(b, off, len);
    diff.update(b, off, len);
    uncompressed += len;
  }

  private void openMember() throws IOException {
    if (member != null) {
      return;
    }
    OutputStream shield = new FilterOutputStream(raw) {
      @Override
      public void write(byte[] b, int off, int len) throws IOException {
        out.write(b, off, len);
      }

      @Override
      public void close() throws IOException {
        flush();
      }
    };
    if (format == LayerFormat.ESTARGZ) {
      member = new GZIPOutputStream(shield, 1 << 16) {
        {
          def.setLevel(level);
        }
      };
    } else {
      member = new ZstdOutputStream(shield, level);
    }
  }

  private void closeMember() throws IOException {
    if (member != null) {
      member.close();
      member = null;
    }
  }

  // --- tar-split (zstd:chunked) ---

  private void tarSplitFile(String name, long size, byte[] crc) throws IOException {
    flushSegment();
    ObjectNode line = JSON.createObjectNode();
    line.put("type", 1);
    line.put("name", name);
    if (size > 0) {
      line.put("size", size);
    }
    if (crc == null) {
      line.putNull("payload");
    } else {
      line.put("payload", Base64.getEncoder().encodeToString(crc));
    }
    line.put("position", tarSplitPosition++);
    tarSplit.writeBytes(JSON.writeValueAsBytes(line));
    tarSplit.write('\n');
  }

  private void flushSegment() throws IOException {
    if (segment.size() == 0) {
      return;
    }
    ObjectNode line = JSON.createObjectNode();
    line.put("type", 2);
    line.put("payload", Base64.getEncoder().encodeToString(segment.toByteArray()));
    line.put("position", tarSplitPosition++);
    tarSplit.writeBytes(JSON.writeValueAsBytes(line));
    tarSplit.write('\n');
    segment.reset();
  }

  private byte[] toc(Digest tarSplitDigest) throws IOException {
    ObjectNode root = JSON.createObjectNode();
    root.put("version", 1);
    root.set("entries", tocEntries);
    if (tarSplitDigest != null) {
      root.put("tarSplitDigest", tarSplitDigest.toString());
    }
    return JSON.writeValueAsBytes(root);
  }

  // --- trailers ---

  private ConvertedLayer finishEstargz(Path out) throws IOException {
    closeMember();
    byte[] json = toc(null);
    long tocOffset = raw.count;
    ByteArrayOutputStream tocTar = new ByteArrayOutputStream(json.length + 2048);
    TarWriter.writeHeader(tocTar, TarHeader.regular(EstargzToc.TOC_NAME, json.length, 0644, java.time.Instant.EPOCH));
    tocTar.writeBytes(json);
    TarWriter.pad(tocTar, json.length);
    TarWriter.writeEnd(tocTar);
    byte[] t = tocTar.toByteArray();
    openMember();
    writeUncompressed(t, 0, t.length);
    closeMember();
    raw.write(EstargzToc.footer(tocOffset));
    Digest tocDigest = Digest.sha256(json);
    Map<String, String> annotations = new LinkedHashMap<>();
    annotations.put(LayerFormat.ESTARGZ_TOC_DIGEST, tocDigest.toString());
    annotations.put(LayerFormat.ESTARGZ_UNCOMPRESSED_SIZE, Long.toString(uncompressed));
    annotations.put(LayerFormat.ESTARGZ_TOC_OFFSET, Long.toString(tocOffset));
    annotations.put(LayerFormat.ESTARGZ_TAIL_LABEL, new EstargzTail(tocOffset, raw.count).label());
    return result(out, tocDigest, annotations);
  }

  private ConvertedLayer finishZstdChunked(Path out) throws IOException {
    byte[] end = new byte[2 * TarWriter.BLOCK];
    writeSegment(end);
    closeMember();
    flushSegment();
    byte[] split = tarSplit.toByteArray();
    byte[] splitCompressed = Zstd.compress(split, level);
    byte[] json = toc(Digest.sha256(splitCompressed));
    byte[] manifest = Zstd.compress(json, level);
    long manifestOffset = skippable(manifest);
    long splitOffset = skippable(splitCompressed);
    ByteBuffer footer = ByteBuffer.allocate(ZstdChunkedToc.FOOTER_SIZE).order(ByteOrder.LITTLE_ENDIAN);
    footer.putInt(ZstdChunkedToc.SKIPPABLE_MAGIC).putInt(64);
    footer.putLong(manifestOffset).putLong(manifest.length).putLong(json.length).putLong(1);
    footer.putLong(splitOffset).putLong(splitCompressed.length).putLong(split.length);
    footer.putLong(ZstdChunkedToc.FOOTER_MAGIC);
    raw.write(footer.array());
    Digest tocDigest = Digest.sha256(manifest);
    Map<String, String> annotations = new LinkedHashMap<>();
    annotations.put(LayerFormat.ZSTD_CHUNKED_MANIFEST_CHECKSUM, tocDigest.toString());
    annotations.put(
        LayerFormat.ZSTD_CHUNKED_MANIFEST_POSITION, manifestOffset + ":" + manifest.length + ":" + json.length + ":1");
    annotations.put(
        LayerFormat.ZSTD_CHUNKED_TARSPLIT_POSITION, splitOffset + ":" + splitCompressed.length + ":" + split.length);
    return result(out, tocDigest, annotations);
  }

  /** Writes {@code payload} in a zstd skippable frame; returns the payload's offset. */
  private long skippable(byte[] payload) throws IOException {
    ByteBuffer h = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
    h.putInt(ZstdChunkedToc.SKIPPABLE_MAGIC).putInt(payload.length);
    raw.write(h.array());
    long at = raw.count;
    raw.write(payload);
    return at;
  }

  private ConvertedLayer result(Path out, Digest tocDigest, Map<String, String> annotations) throws IOException {
    raw.flush();
    Digest diffId = Digest.of("sha256", diff);
    return new ConvertedLayer(
        format, out, raw.digest(), raw.count, diffId, uncompressed, tocDigest, annotations, tocEntries.size(), chunkCount);
  }

  /** Counts and hashes the compressed bytes: their count is every stored offset, their hash the blob digest. */
  private static final class CountingOutputStream extends FilterOutputStream {
    long count;
    private final MessageDigest md = Digest.newMessageDigest("sha256");

    CountingOutputStream(OutputStream out) {
      super(out);
    }

    @Override
    public void write(int b) throws IOException {
      out.write(b);
      md.update((byte) b);
      count++;
    }

    @Override
    public void write(byte[] b, int off, int len) throws IOException {
      out.write(b, off, len);
      md.update(b, off, len);
      count += len;
    }

    Digest digest() {
      return Digest.of("sha256", md);
    }
  }
}
