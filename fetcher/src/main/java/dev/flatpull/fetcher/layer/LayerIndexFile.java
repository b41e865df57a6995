package dev.flatpull.fetcher.layer;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import java.io.BufferedOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.zip.CRC32C;

/**
 * A layer's verified index as a binary file, so that a later mount of the layer (a second image with the same base, a
 * FUSE manager restarted, a remount after a crash) neither fetches nor parses its TOC. The file is derived from the
 * index built from a TOC checked against the layer descriptor's digests, and is kept in the node's root-only state;
 * it is named by a {@link Key} that covers every part of the descriptor the index depends on.
 *
 * <p>Layout (big-endian): a 24-byte header, {@code FPINDEX\n}, the format version, the CRC32C of the body and the
 * body's length; then the body: the key, the index's own fields, its entries (each with its chunks), the names before
 * the prefetch landmark and the verified tar-split. A file whose magic, version, checksum, length, key or structure
 * does not match is refused with the reason; its owner rebuilds it from the TOC.
 */
public final class LayerIndexFile {
  static final byte[] MAGIC = "FPINDEX\n".getBytes(StandardCharsets.US_ASCII);
  static final int VERSION = 1;
  static final int HEADER = 24;

  private LayerIndexFile() {}

  /**
   * What a layer's index is derived from: its format, its blob and the descriptor's annotations that vouch for its
   * TOC and tar-split. Two descriptors with the same key give the same index.
   */
  public record Key(Digest digest) {
    /** The annotations an index depends on: a descriptor that differs in one of them names another index. */
    private static final List<String> BINDING = List.of(LayerFormat.ESTARGZ_TOC_DIGEST,
        LayerFormat.ZSTD_CHUNKED_MANIFEST_CHECKSUM, LayerFormat.ZSTD_CHUNKED_MANIFEST_POSITION,
        LayerFormat.ZSTD_CHUNKED_TARSPLIT_CHECKSUM, LayerFormat.ZSTD_CHUNKED_TARSPLIT_POSITION,
        LayerFormat.LEGACY_ZSTD_CHUNKED_MANIFEST_CHECKSUM, LayerFormat.LEGACY_ZSTD_CHUNKED_MANIFEST_POSITION);

    public static Key of(LayerFormat format, Descriptor layer) {
      Map<String, String> bound = new TreeMap<>();
      for (String k : BINDING) {
        layer.annotation(k).ifPresent(v -> bound.put(k, v));
      }
      StringBuilder text = new StringBuilder("flatpull layer index ").append(VERSION).append('\n').append(format)
          .append('\n').append(layer.digest()).append('\n').append(layer.size()).append('\n');
      bound.forEach((k, v) -> text.append(k).append('=').append(v).append('\n'));
      return new Key(Digest.sha256(text.toString().getBytes(StandardCharsets.UTF_8)));
    }

    /** The file's name among the node's kept files. */
    public String fileName() {
      return "layer-index-" + digest.hex();
    }
  }

  /** Writes {@code index}, derived from the layer {@code key} names, to {@code file} (positioned at 0). */
  public static void write(Key key, LayerIndex index, FileChannel file) throws IOException {
    CRC32C crc = new CRC32C();
    long[] length = {0};
    file.position(HEADER);
    OutputStream sink = new OutputStream() {
      private final OutputStream out = Channels.newOutputStream(file);

      @Override
      public void write(int b) throws IOException {
        crc.update(b);
        length[0]++;
        out.write(b);
      }

      @Override
      public void write(byte[] b, int off, int len) throws IOException {
        crc.update(b, off, len);
        length[0] += len;
        out.write(b, off, len);
      }
    };
    DataOutputStream out = new DataOutputStream(new BufferedOutputStream(sink, 1 << 16));
    writeBody(out, key, index);
    out.flush();
    ByteBuffer header = ByteBuffer.allocate(HEADER).put(MAGIC).putInt(VERSION).putInt((int) crc.getValue())
        .putLong(length[0]).flip();
    while (header.hasRemaining()) {
      file.write(header, header.position());
    }
    file.force(false);
  }

  private static void writeBody(DataOutputStream out, Key key, LayerIndex index) throws IOException {
    writeDigest(out, key.digest());
    out.writeByte(index.format().ordinal());
    out.writeByte(index.compression().ordinal());
    writeDigest(out, index.blob());
    writeDigest(out, index.tocDigest().orElse(null));
    writeDigest(out, index.tarSplitDigest().orElse(null));
    out.writeBoolean(index.tarSplitChecked());
    byte[] tarSplit = index.tarSplitFrame();
    out.writeInt(tarSplit == null ? -1 : tarSplit.length);
    if (tarSplit != null) {
      out.write(tarSplit);
    }
    out.writeLong(index.tarSplitLength());
    out.writeInt(index.entries().size());
    for (LayerEntry e : index.entries()) {
      writeString(out, e.name());
      out.writeByte(e.type().ordinal());
      out.writeLong(e.size());
      out.writeInt(e.mode());
      out.writeInt(e.uid());
      out.writeInt(e.gid());
      writeString(out, e.userName());
      writeString(out, e.groupName());
      out.writeLong(e.modTime().getEpochSecond());
      out.writeInt(e.modTime().getNano());
      writeString(out, e.linkName());
      out.writeInt(e.devMajor());
      out.writeInt(e.devMinor());
      out.writeInt(e.xattrs().size());
      for (Map.Entry<String, byte[]> x : e.xattrs().entrySet()) {
        writeString(out, x.getKey());
        out.writeInt(x.getValue().length);
        out.write(x.getValue());
      }
      writeDigest(out, e.digest().orElse(null));
      out.writeInt(e.chunks().size());
      for (LayerChunk c : e.chunks()) {
        out.writeLong(c.fileOffset());
        out.writeLong(c.size());
        out.writeLong(c.stored().offset());
        out.writeLong(c.stored().length());
        out.writeLong(c.innerOffset());
        writeDigest(out, c.digest());
      }
    }
    out.writeInt(index.prioritized().size());
    for (String p : index.prioritized()) {
      writeString(out, p);
    }
  }

  private static void writeString(DataOutputStream out, String s) throws IOException {
    if (s == null) {
      out.writeInt(-1);
      return;
    }
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    out.writeInt(b.length);
    out.write(b);
  }

  private static void writeDigest(DataOutputStream out, Digest d) throws IOException {
    if (d == null) {
      out.writeByte(0);
      return;
    }
    out.writeByte(d.algorithm().equals("sha256") ? 1 : 2);
    out.write(d.raw());
  }

  /**
   * Reads the index kept in {@code file} for the layer {@code key} names.
   *
   * @throws LayerFormatException saying why the file is refused (its owner rebuilds it)
   */
  public static LayerIndex read(Key key, Path file) throws IOException {
    try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
      long size = ch.size();
      if (size < HEADER) {
        throw refused(file, "it is " + size + " bytes, shorter than its header");
      }
      // Mapped, not read: a layer of a million entries has an index file of a hundred MiB or more.
      ByteBuffer b = ch.map(FileChannel.MapMode.READ_ONLY, 0, size);
      byte[] magic = new byte[MAGIC.length];
      b.get(magic);
      if (!java.util.Arrays.equals(magic, MAGIC)) {
        throw refused(file, "it does not start as a layer index file");
      }
      int version = b.getInt();
      if (version != VERSION) {
        throw refused(file, "its format version is " + version + ", this build reads " + VERSION);
      }
      int crc = b.getInt();
      long length = b.getLong();
      if (length != size - HEADER) {
        throw refused(file, "its header announces " + length + " bytes of body, the file holds " + (size - HEADER));
      }
      CRC32C actual = new CRC32C();
      actual.update(b.duplicate());
      if ((int) actual.getValue() != crc) {
        throw refused(file, "its checksum does not match its content");
      }
      try {
        return readBody(key, b, file);
      } catch (BufferUnderflowException | IllegalArgumentException | IndexOutOfBoundsException e) {
        throw refused(file, "its content is malformed (" + e + ")");
      }
    }
  }

  private static LayerFormatException refused(Path file, String why) {
    return new LayerFormatException("layer index file " + file.getFileName() + " refused: " + why);
  }

  private static LayerIndex readBody(Key key, ByteBuffer b, Path file) throws LayerFormatException {
    Digest kept = readDigest(b);
    if (!key.digest().equals(kept)) {
      throw refused(file, "it was written for another layer descriptor");
    }
    LayerFormat format = LayerFormat.values()[b.get()];
    ChunkCompression compression = ChunkCompression.values()[b.get()];
    Digest blob = readDigest(b);
    Optional<Digest> toc = Optional.ofNullable(readDigest(b));
    Optional<Digest> tarSplitDigest = Optional.ofNullable(readDigest(b));
    boolean tarSplitChecked = b.get() != 0;
    int tarSplitBytes = b.getInt();
    byte[] tarSplit = tarSplitBytes < 0 ? null : bytes(b, tarSplitBytes);
    long tarSplitLength = b.getLong();
    int count = b.getInt();
    if (count < 0 || count > b.remaining()) {
      throw refused(file, "it announces " + count + " entries");
    }
    // User and group names repeat on nearly every entry: one string each, as the TOC parser keeps them.
    Map<String, String> names = new HashMap<>();
    List<LayerEntry> entries = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      String name = readString(b);
      EntryType type = EntryType.values()[b.get()];
      long size = b.getLong();
      int mode = b.getInt();
      int uid = b.getInt();
      int gid = b.getInt();
      String user = shared(names, readString(b));
      String group = shared(names, readString(b));
      Instant modTime = Instant.ofEpochSecond(b.getLong(), b.getInt());
      String linkName = readString(b);
      int devMajor = b.getInt();
      int devMinor = b.getInt();
      int xattrCount = b.getInt();
      if (xattrCount < 0 || xattrCount > b.remaining()) {
        throw refused(file, "an entry announces " + xattrCount + " extended attributes");
      }
      Map<String, byte[]> xattrs = xattrCount == 0 ? Map.of() : new LinkedHashMap<>();
      for (int x = 0; x < xattrCount; x++) {
        String k = readString(b);
        xattrs.put(k, bytes(b, b.getInt()));
      }
      Optional<Digest> digest = Optional.ofNullable(readDigest(b));
      int chunkCount = b.getInt();
      if (chunkCount < 0 || chunkCount > b.remaining()) {
        throw refused(file, "an entry announces " + chunkCount + " chunks");
      }
      List<LayerChunk> chunks = new ArrayList<>(chunkCount);
      for (int c = 0; c < chunkCount; c++) {
        long fileOffset = b.getLong();
        long chunkSize = b.getLong();
        long storedOffset = b.getLong();
        long storedLength = b.getLong();
        long innerOffset = b.getLong();
        chunks.add(new LayerChunk(fileOffset, chunkSize, new dev.flatpull.core.ByteRange(storedOffset, storedLength),
            innerOffset, readDigest(b)));
      }
      entries.add(new LayerEntry(name, type, size, mode, uid, gid, user, group, modTime, linkName, devMajor, devMinor,
          xattrs, digest, chunks));
    }
    int prioritizedCount = b.getInt();
    if (prioritizedCount < 0 || prioritizedCount > b.remaining()) {
      throw refused(file, "it announces " + prioritizedCount + " prioritized names");
    }
    List<String> prioritized = new ArrayList<>(prioritizedCount);
    for (int i = 0; i < prioritizedCount; i++) {
      prioritized.add(readString(b));
    }
    if (b.hasRemaining()) {
      throw refused(file, b.remaining() + " bytes follow its last field");
    }
    LayerIndex index = new LayerIndex(format, blob, toc, compression, entries, prioritized, tarSplitDigest,
        tarSplitChecked);
    return (tarSplit == null ? index : index.withTarSplitChecked(tarSplit, tarSplitLength)).asKept();
  }

  private static String shared(Map<String, String> names, String s) {
    return s == null ? null : names.computeIfAbsent(s, x -> x);
  }

  private static byte[] bytes(ByteBuffer b, int n) {
    if (n < 0 || n > b.remaining()) {
      throw new IllegalArgumentException("a field of " + n + " bytes where " + b.remaining() + " remain");
    }
    byte[] out = new byte[n];
    b.get(out);
    return out;
  }

  private static String readString(ByteBuffer b) {
    int n = b.getInt();
    return n < 0 ? null : new String(bytes(b, n), StandardCharsets.UTF_8);
  }

  private static Digest readDigest(ByteBuffer b) {
    int kind = b.get();
    return switch (kind) {
      case 0 -> null;
      case 1 -> Digest.ofRaw("sha256", bytes(b, 32));
      case 2 -> Digest.ofRaw("sha512", bytes(b, 64));
      default -> throw new IllegalArgumentException("digest kind " + kind);
    };
  }
}
