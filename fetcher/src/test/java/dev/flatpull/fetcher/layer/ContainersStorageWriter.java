package dev.flatpull.fetcher.layer;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.github.luben.zstd.Zstd;
import com.github.luben.zstd.ZstdOutputStream;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.security.MessageDigest;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A zstd:chunked writer for tests that follows containers/storage's compressor ({@code pkg/chunked/compressor} and
 * {@code pkg/chunked/internal}) line by line, not flatpull's converter: content-defined chunks from its rolling sum,
 * runs of at least 1 KiB of zeros as {@code zeros} chunks, a new frame for each chunk, {@code endOffset} only on a
 * file's first entry, chunk fields only for files of more than one chunk, and each {@link Generation}'s annotations,
 * tar-split and footer. It gives the reader layouts that flatpull never writes itself.
 */
final class ContainersStorageWriter {
  /** The layouts containers/storage has written, named by the first release that wrote each. */
  enum Generation {
    /** v1.43 (Debian 12's skopeo, podman and buildah): {@code io.containers.*} annotations, a 40-byte footer. */
    V1_43,
    /** v1.44-v1.46: {@code io.github.containers.*} annotations. */
    V1_44,
    /** v1.47-v1.49: a tar-split frame, its digest in an annotation, a 56-byte footer. */
    V1_47,
    /** v1.50-v1.53: the tar-split's place in a 64-byte footer. */
    V1_50,
    /** v1.54 to today: the tar-split's digest in the TOC ({@code tarSplitDigest}), not in an annotation. */
    V1_54;

    boolean hasTarSplit() {
      return compareTo(V1_47) >= 0;
    }
  }

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int ROLLSUM_BITS = 16;
  private static final long HOLES_THRESHOLD = 1 << 10;
  private static final int SKIPPABLE_MAGIC = 0x184d2a50;
  private static final long FOOTER_MAGIC = 0x78556e496c554e47L;

  /** The written blob and the descriptor a registry would list it with. */
  record Written(byte[] blob, Descriptor descriptor, byte[] tocJson, byte[] tarSplit) {}

  private final ByteArrayOutputStream dest = new ByteArrayOutputStream();
  private OutputStream frame;
  private final ByteArrayOutputStream tarSplit = new ByteArrayOutputStream();
  private int tarSplitPosition;

  private ContainersStorageWriter() {}

  /** Compresses the uncompressed {@code tar} as {@code generation} did, at zstd level 3 (its default). */
  static Written write(byte[] tar, Generation generation) throws IOException {
    return write(tar, generation, entries -> {});
  }

  /** As {@link #write(byte[], Generation)}, with {@code edit} applied to the TOC's entries before they are written. */
  static Written write(byte[] tar, Generation generation, java.util.function.Consumer<ArrayNode> edit)
      throws IOException {
    return new ContainersStorageWriter().run(tar, generation, edit);
  }

  private Written run(byte[] tar, Generation g, java.util.function.Consumer<ArrayNode> edit) throws IOException {
    TarReader reader = new TarReader(new ByteArrayInputStream(tar));
    ArrayNode entries = JSON.createArrayNode();
    long consumed = 0;
    TarHeader h;
    while ((h = reader.next()) != null) {
      // Go's tar reader with RawAccounting: the previous entry's padding and this entry's header blocks.
      long dataAt = reader.dataOffset();
      byte[] raw = java.util.Arrays.copyOfRange(tar, (int) consumed, (int) dataAt);
      write(raw);
      segment(raw);
      long size = h.isRegular() ? h.size() : 0;
      byte[] content = java.util.Arrays.copyOfRange(tar, (int) dataAt, (int) (dataAt + size));
      consumed = dataAt + size;
      fileEntry(h.name(), size, content);
      compressFile(h, content, entries);
    }
    byte[] rest = java.util.Arrays.copyOfRange(tar, (int) consumed, tar.length);
    write(rest);
    segment(rest);
    closeFrame();

    edit.accept(entries);
    byte[] split = tarSplit.toByteArray();
    byte[] splitCompressed = Zstd.compress(split, 3);
    ObjectNode toc = JSON.createObjectNode();
    toc.put("version", 1);
    toc.set("entries", entries);
    if (g.compareTo(Generation.V1_54) >= 0) {
      toc.put("tarSplitDigest", Digest.sha256(splitCompressed).toString());
    }
    byte[] json = JSON.writeValueAsBytes(toc);
    byte[] manifest = Zstd.compress(json, 3);
    long manifestOffset = dest.size() + 8L;
    skippable(manifest);
    Map<String, String> annotations = new LinkedHashMap<>();
    String prefix = g == Generation.V1_43 ? "io.containers.zstd-chunked." : "io.github.containers.zstd-chunked.";
    annotations.put(prefix + "manifest-checksum", Digest.sha256(manifest).toString());
    annotations.put(prefix + "manifest-position", manifestOffset + ":" + manifest.length + ":" + json.length + ":1");
    long splitOffset = 0;
    if (g.hasTarSplit()) {
      splitOffset = dest.size() + 8L;
      skippable(splitCompressed);
      annotations.put(prefix + "tarsplit-position", splitOffset + ":" + splitCompressed.length + ":" + split.length);
      if (g.compareTo(Generation.V1_54) < 0) {
        annotations.put(prefix + "tarsplit-checksum", Digest.sha256(splitCompressed).toString());
      }
    }
    int footerSize = g.compareTo(Generation.V1_47) < 0 ? 40 : g.compareTo(Generation.V1_50) < 0 ? 56 : 64;
    ByteBuffer footer = ByteBuffer.allocate(footerSize).order(ByteOrder.LITTLE_ENDIAN);
    footer.putLong(manifestOffset).putLong(manifest.length).putLong(json.length).putLong(1);
    if (footerSize == 64) {
      footer.putLong(splitOffset).putLong(splitCompressed.length).putLong(split.length);
    }
    footer.putLong(footerSize == 64 ? 56 : 32, FOOTER_MAGIC);
    skippable(footer.array());
    byte[] blob = dest.toByteArray();
    Descriptor d = new Descriptor(MediaTypes.OCI_LAYER_ZSTD, Digest.sha256(blob), blob.length, annotations);
    return new Written(blob, d, json, g.hasTarSplit() ? split : new byte[0]);
  }

  // --- writeZstdChunkedStream's loop over one entry's payload ---

  private record Chunk(long chunkOffset, long offset, String checksum, long chunkSize, boolean zeros) {}

  private void compressFile(TarHeader h, byte[] content, ArrayNode out) throws IOException {
    MessageDigest payload = Digest.newMessageDigest("sha256");
    MessageDigest chunkDigest = Digest.newMessageDigest("sha256");
    long startOffset = 0;
    long lastOffset = 0;
    long lastChunkOffset = 0;
    String checksum = "";
    List<Chunk> chunks = new ArrayList<>();
    RollingReader rc = new RollingReader(new HolesFinder(content));
    byte[] buf = new byte[4096];
    while (true) {
      RollingReader.Result r = rc.read(buf);
      if (r.read > 0) {
        if (startOffset == 0) {
          startOffset = restartCompression();
          lastOffset = startOffset;
        }
        payload.update(buf, 0, r.read);
        chunkDigest.update(buf, 0, r.read);
        write(java.util.Arrays.copyOf(buf, r.read));
      }
      if ((r.mustSplit || r.eof) && startOffset > 0) {
        long off = restartCompression();
        long chunkSize = rc.writtenOut - lastChunkOffset;
        if (chunkSize > 0) {
          chunks.add(new Chunk(lastChunkOffset, lastOffset, Digest.of("sha256", chunkDigest).toString(), chunkSize,
              rc.lastChunkZeros));
        }
        lastOffset = off;
        lastChunkOffset = rc.writtenOut;
        chunkDigest = Digest.newMessageDigest("sha256");
      }
      if (r.eof) {
        if (startOffset > 0) {
          checksum = Digest.of("sha256", payload).toString();
        }
        break;
      }
    }
    List<ObjectNode> entries = new ArrayList<>();
    ObjectNode main = fileMetadata(h);
    put(main, "digest", checksum);
    put(main, "offset", startOffset);
    put(main, "endOffset", lastOffset);
    entries.add(main);
    for (int i = 1; i < chunks.size(); i++) {
      ObjectNode c = JSON.createObjectNode();
      c.put("type", "chunk");
      c.put("name", h.name());
      put(c, "chunkOffset", chunks.get(i).chunkOffset());
      entries.add(c);
    }
    if (chunks.size() > 1) {
      for (int i = 0; i < chunks.size(); i++) {
        Chunk c = chunks.get(i);
        // Go's struct field order: the chunk fields follow offset/endOffset; a re-put keeps the first position.
        ObjectNode e = entries.get(i);
        put(e, "chunkSize", c.chunkSize());
        put(e, "offset", c.offset());
        put(e, "chunkDigest", c.checksum());
        put(e, "chunkType", c.zeros() ? "zeros" : "");
      }
    }
    entries.forEach(out::add);
  }

  /** minimal.NewFileMetadata: the tar header's fields, zero values left out (Go's omitempty). */
  private static ObjectNode fileMetadata(TarHeader h) {
    ObjectNode e = JSON.createObjectNode();
    e.put("type", switch (h.type()) {
      case TarHeader.DIR -> "dir";
      case TarHeader.SYMLINK -> "symlink";
      case TarHeader.HARDLINK -> "hardlink";
      case TarHeader.CHAR -> "char";
      case TarHeader.BLOCK -> "block";
      case TarHeader.FIFO -> "fifo";
      default -> "reg";
    });
    e.put("name", h.name());
    put(e, "linkName", h.linkName());
    put(e, "mode", h.mode());
    put(e, "size", h.isRegular() ? h.size() : 0);
    put(e, "uid", h.uid());
    put(e, "gid", h.gid());
    if (!h.modTime().equals(java.time.Instant.EPOCH)) {
      e.put("modtime", DateTimeFormatter.ISO_INSTANT.format(h.modTime()));
    }
    put(e, "devMajor", h.devMajor());
    put(e, "devMinor", h.devMinor());
    if (!h.xattrs().isEmpty()) {
      ObjectNode x = e.putObject("xattrs");
      new TreeMap<>(h.xattrs()).forEach((k, v) -> x.put(k, Base64.getEncoder().encodeToString(v)));
    }
    return e;
  }

  private static void put(ObjectNode e, String field, long v) {
    if (v != 0) {
      e.put(field, v);
    }
  }

  private static void put(ObjectNode e, String field, String v) {
    if (v != null && !v.isEmpty()) {
      e.put(field, v);
    }
  }

  // --- frames ---

  private void write(byte[] b) throws IOException {
    if (frame == null) {
      frame = new ZstdOutputStream(new FilterOutputStream(dest) {
        @Override
        public void write(byte[] bytes, int off, int len) {
          dest.write(bytes, off, len);
        }

        @Override
        public void close() {}
      }, 3);
    }
    frame.write(b);
  }

  /** Closes the current frame (an empty one when nothing was written, as klauspost's encoder does) and returns its end. */
  private long restartCompression() throws IOException {
    if (frame == null) {
      dest.writeBytes(Zstd.compress(new byte[0], 3));
    } else {
      closeFrame();
    }
    return dest.size();
  }

  private void closeFrame() throws IOException {
    if (frame != null) {
      frame.close();
      frame = null;
    }
  }

  private void skippable(byte[] data) {
    ByteBuffer h = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
    h.putInt(SKIPPABLE_MAGIC).putInt(data.length);
    dest.writeBytes(h.array());
    dest.writeBytes(data);
  }

  // --- tar-split (vbatts/tar-split's JSON packer: segments and files) ---

  private void segment(byte[] raw) throws IOException {
    if (raw.length == 0) {
      return;
    }
    ObjectNode line = JSON.createObjectNode();
    line.put("type", 2);
    line.put("payload", Base64.getEncoder().encodeToString(raw));
    line.put("position", tarSplitPosition++);
    tarSplit.writeBytes(JSON.writeValueAsBytes(line));
    tarSplit.write('\n');
  }

  private void fileEntry(String name, long size, byte[] content) throws IOException {
    ObjectNode line = JSON.createObjectNode();
    line.put("type", 1);
    line.put("name", name);
    if (size > 0) {
      line.put("size", size);
      line.put("payload", Base64.getEncoder().encodeToString(crc64(content)));
    } else {
      line.putNull("payload");
    }
    line.put("position", tarSplitPosition++);
    tarSplit.writeBytes(JSON.writeValueAsBytes(line));
    tarSplit.write('\n');
  }

  /** CRC-64 with the ISO polynomial, big-endian, as tar-split records each file's payload. */
  private static byte[] crc64(byte[] b) {
    long[] table = new long[256];
    for (int i = 0; i < 256; i++) {
      long crc = i;
      for (int j = 0; j < 8; j++) {
        crc = (crc & 1) == 1 ? (crc >>> 1) ^ 0xD800000000000000L : crc >>> 1;
      }
      table[i] = crc;
    }
    long crc = ~0L;
    for (byte x : b) {
      crc = table[(int) ((crc ^ x) & 0xff)] ^ (crc >>> 8);
    }
    return ByteBuffer.allocate(8).putLong(~crc).array();
  }

  // --- compressor.go's holesFinder and rollingChecksumReader, and rollsum.go ---

  private static final class HolesFinder {
    private final byte[] in;
    private int pos;
    long zeros;
    int state; // 0 read, 1 accumulate, 2 found, 3 eof

    HolesFinder(byte[] in) {
      this.in = in;
    }

    /** {holeLength, byte}, or null at the end. */
    long[] readByte() {
      while (true) {
        switch (state) {
          case 0 -> {
            if (zeros > 0) {
              zeros--;
              return new long[] {0, 0};
            }
            if (pos == in.length) {
              return null;
            }
            byte b = in[pos++];
            if (b != 0) {
              return new long[] {0, b & 0xff};
            }
            zeros = 1;
            state = zeros == HOLES_THRESHOLD ? 2 : 1;
          }
          case 1 -> {
            if (pos == in.length) {
              state = 3;
              continue;
            }
            byte b = in[pos++];
            if (b == 0) {
              zeros++;
              if (zeros == HOLES_THRESHOLD) {
                state = 2;
              }
            } else {
              pos--;
              state = 0;
            }
          }
          case 2 -> {
            if (pos == in.length) {
              state = 3;
              long hole = zeros;
              zeros = 0;
              return new long[] {hole, 0};
            }
            byte b = in[pos++];
            if (b != 0) {
              pos--;
              state = 0;
              long hole = zeros;
              zeros = 0;
              return new long[] {hole, 0};
            }
            zeros++;
          }
          default -> {
            if (zeros > 0) {
              zeros--;
              return new long[] {0, 0};
            }
            return null;
          }
        }
      }
    }
  }

  private static final class RollingReader {
    record Result(boolean mustSplit, int read, boolean eof) {}

    private final HolesFinder reader;
    private boolean closed;
    private long pendingHole;
    long writtenOut;
    boolean lastChunkZeros;
    // rollsum.go: windowSize 64, charOffset 31
    private int s1 = 64 * 31;
    private int s2 = 64 * 63 * 31;
    private final byte[] window = new byte[64];
    private int wofs;

    RollingReader(HolesFinder reader) {
      this.reader = reader;
    }

    private void roll(int ch) {
      int drop = window[wofs] & 0xff;
      s1 = s1 + ch - drop;
      s2 += s1 - 64 * (drop + 31);
      window[wofs] = (byte) ch;
      wofs = (wofs + 1) & 63;
    }

    private boolean onSplit() {
      int mask = (1 << ROLLSUM_BITS) - 1;
      return (s2 & mask) == mask;
    }

    Result read(byte[] b) {
      lastChunkZeros = false;
      if (pendingHole > 0) {
        int toCopy = (int) Math.min(pendingHole, b.length);
        pendingHole -= toCopy;
        java.util.Arrays.fill(b, 0, toCopy, (byte) 0);
        writtenOut += toCopy;
        lastChunkZeros = true;
        return new Result(pendingHole == 0, toCopy, false);
      }
      if (closed) {
        return new Result(false, 0, true);
      }
      for (int i = 0; i < b.length; i++) {
        long[] r = reader.readByte();
        if (r == null) {
          closed = true;
          return i == 0 ? new Result(false, 0, true) : new Result(false, i, false);
        }
        if (r[0] > 0) {
          for (long j = 0; j < r[0]; j++) {
            roll(0);
          }
          pendingHole = r[0];
          return new Result(true, i, false);
        }
        b[i] = (byte) r[1];
        writtenOut++;
        roll((int) r[1]);
        if (onSplit()) {
          return new Result(true, i + 1, false);
        }
      }
      return new Result(false, b.length, false);
    }
  }
}
