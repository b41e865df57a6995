package dev.flatpull.fetcher.layer;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
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
 * <p>Layout: a 24-byte header, {@code FPINDEX\n}, the format version, the CRC32C of the body and the body's length
 * (big-endian); then the body: the length of its first part, the first part (the key, the index's own fields, the
 * names before the prefetch landmark and the verified tar-split, big-endian), padding to a multiple of 8, and the
 * entries' {@link EntryTable} as the index holds it. Reading checks the checksum with positional reads, and then maps
 * the table and uses it in place: no entry is parsed, and only the pages that lookups touch become the process's
 * (a deleted file stays readable while mapped, so evicting it under a mount is safe; a kept file is never rewritten in
 * place, only written whole under another name and renamed, which a map needs: a file truncated under a map would
 * fault its reader). A file whose magic, version,
 * checksum, length, key or structure does not match is refused with the reason; its owner rebuilds it from the
 * TOC.
 */
public final class LayerIndexFile {
  static final byte[] MAGIC = "FPINDEX\n".getBytes(StandardCharsets.US_ASCII);
  static final int VERSION = 2;
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
    java.io.ByteArrayOutputStream first = new java.io.ByteArrayOutputStream();
    DataOutputStream out = new DataOutputStream(first);
    writeFirstPart(out, key, index);
    out.flush();
    int pad = padding(first.size());
    ByteBuffer lead = ByteBuffer.allocate(4 + first.size() + pad).putInt(first.size()).put(first.toByteArray());
    lead.position(lead.limit()).flip();
    List<ByteBuffer> body = new ArrayList<>(List.of(lead));
    body.addAll(index.table().bytes());
    CRC32C crc = new CRC32C();
    long length = 0;
    for (ByteBuffer part : body) {
      crc.update(part.duplicate());
      length += part.remaining();
    }
    ByteBuffer header = ByteBuffer.allocate(HEADER).put(MAGIC).putInt(VERSION).putInt((int) crc.getValue())
        .putLong(length).flip();
    body.add(0, header);
    long at = 0;
    for (ByteBuffer part : body) {
      while (part.hasRemaining()) {
        at += file.write(part, at);
      }
    }
    // Not forced to the disk: a takeover after a crash of the manager reads it from the kernel's page cache, and a file
    // a power loss tore is refused by its checksum and rebuilt. An fsync here, while a start ran, cost that start
    // (ext4 commits its journal, and the writes queued with it).
  }

  /** Zero bytes after the first part, so that the table starts at a multiple of 8 from the file's start. */
  private static int padding(int firstPart) {
    return (int) ((8 - (HEADER + 4 + firstPart) % 8) % 8);
  }

  /** About the size of {@code index}'s file: all but its fixed-size fields, a few hundred bytes. */
  static long approximateLength(LayerIndex index) {
    long length = index.table().bytes().stream().mapToLong(ByteBuffer::remaining).sum();
    byte[] tarSplit = index.tarSplitFrame();
    length += tarSplit == null ? 0 : tarSplit.length;
    for (String p : index.prioritized()) {
      length += 4 + p.getBytes(StandardCharsets.UTF_8).length;
    }
    return length;
  }

  private static void writeFirstPart(DataOutputStream out, Key key, LayerIndex index) throws IOException {
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
      ByteBuffer b = ByteBuffer.allocate(HEADER);
      readFully(ch, b, 0);
      b.flip();
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
      if (crc != bodyChecksum(ch, size)) {
        throw refused(file, "its checksum does not match its content");
      }
      try {
        ByteBuffer firstLength = ByteBuffer.allocate(4);
        readFully(ch, firstLength, HEADER);
        int first = firstLength.flip().getInt();
        long tableAt = HEADER + 4L + first + padding(first);
        if (first < 0 || tableAt > size || size - tableAt > Integer.MAX_VALUE) {
          throw refused(file, "its first part announces " + first + " bytes");
        }
        ByteBuffer front = ByteBuffer.allocate(first);
        readFully(ch, front, HEADER + 4);
        // Mapped, not read: a layer of a million entries has an index file of a hundred MiB or more.
        ByteBuffer table = ch.map(FileChannel.MapMode.READ_ONLY, tableAt, size - tableAt);
        return readBody(key, front.flip(), table, file);
      } catch (BufferUnderflowException | IllegalArgumentException | IndexOutOfBoundsException e) {
        throw refused(file, "its content is malformed (" + e + ")");
      }
    }
  }

  private static void readFully(FileChannel ch, ByteBuffer into, long at) throws IOException {
    long pos = at;
    while (into.hasRemaining()) {
      int n = ch.read(into, pos);
      if (n < 0) {
        throw new java.io.EOFException("the index file ended at " + pos);
      }
      pos += n;
    }
  }

  /**
   * The CRC32C of the body, read through a small buffer rather than the map: the pages stay the kernel's cache and
   * become the process's only where lookups touch them.
   */
  private static int bodyChecksum(FileChannel ch, long size) throws IOException {
    CRC32C crc = new CRC32C();
    ByteBuffer buf = ByteBuffer.allocateDirect(1 << 20);
    for (long at = HEADER; at < size; ) {
      buf.clear();
      int n = ch.read(buf, at);
      if (n < 0) {
        throw new java.io.EOFException("the index file ended at " + at);
      }
      buf.flip();
      crc.update(buf);
      at += n;
    }
    return (int) crc.getValue();
  }

  private static LayerFormatException refused(Path file, String why) {
    return new LayerFormatException("layer index file " + file.getFileName() + " refused: " + why);
  }

  private static LayerIndex readBody(Key key, ByteBuffer b, ByteBuffer table, Path file)
      throws LayerFormatException {
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
    int prioritizedCount = b.getInt();
    if (prioritizedCount < 0 || prioritizedCount > b.remaining()) {
      throw refused(file, "it announces " + prioritizedCount + " prioritized names");
    }
    List<String> prioritized = new ArrayList<>(prioritizedCount);
    for (int i = 0; i < prioritizedCount; i++) {
      prioritized.add(readString(b));
    }
    if (b.hasRemaining()) {
      throw refused(file, b.remaining() + " bytes follow its first part's last field");
    }
    return new LayerIndex(format, blob, toc, compression, EntryTable.wrap(table), prioritized, tarSplitDigest,
        tarSplitChecked, tarSplit, tarSplitLength, true);
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
