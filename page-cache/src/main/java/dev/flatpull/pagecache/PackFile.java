package dev.flatpull.pagecache;

import dev.flatpull.core.Digest;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32C;

/**
 * One append-only file of the disk tier's content: records, each a header (magic, length, SHA-256) and the content,
 * then, once the file is sealed, an index of its records (digest, offset, length) with its count, a CRC32C and a magic
 * number at the very end. A file that was never sealed (its process was killed) is read record by record up to the
 * first one that is not whole. Nothing here is trusted: the index only says where to look, and every read of content
 * is verified against its digest by the tier.
 *
 * <p>Why files of many entries: creating a file costs 100-500 µs on the build machines' ext4 (a journaled inode and
 * directory entry), appending 16 KiB to an open one 6 µs; one file per chunk held the page cache's disk writes to
 * 35-60 MB/s (docs/benchmarks.md, "A runtime image from the socket into the page cache").
 */
final class PackFile {
  /** Bytes before each record's content. */
  static final int HEADER = 4 + 4 + 32;
  private static final int RECORD_MAGIC = 0x46504b31; // "FPK1"
  private static final long INDEX_MAGIC = 0x46504b494e444558L; // "FPKINDEX"
  private static final int INDEX_ENTRY = 32 + 8 + 4;
  private static final int TAIL = 4 + 4 + 8;
  private static final String SUFFIX = ".pack";

  /** Where a record's content is. */
  record Record(Digest digest, long offset, int length) {}

  final long id;
  final Path path;
  private volatile FileChannel channel;
  private volatile boolean deleted;
  /** The tier's clock at the last write or read of an entry here: packs are evicted least recently used first. */
  volatile long lastUsed;
  /** Bytes of the file (guarded by the tier). */
  long size;
  /** Records appended since created, for the index; null once sealed, and for a file found on disk (guarded). */
  private List<Record> appended;

  private PackFile(long id, Path path, FileChannel channel, long size, List<Record> appended) {
    this.id = id;
    this.path = path;
    this.channel = channel;
    this.size = size;
    this.appended = appended;
  }

  static String name(long id) {
    return String.format("%016x%s", id, SUFFIX);
  }

  /** The id a file's name gives, or -1 when it is not a pack's name. */
  static long idOf(String name) {
    if (name.length() != 16 + SUFFIX.length() || !name.endsWith(SUFFIX)) {
      return -1;
    }
    try {
      long id = HexFormat.fromHexDigitsToLong(name, 0, 16);
      return id >= 0 ? id : -1;
    } catch (IllegalArgumentException e) {
      return -1;
    }
  }

  /** A new, empty file open for appends; fails when the name is taken (another process's). */
  static PackFile create(Path dir, long id) throws IOException {
    Path path = dir.resolve(name(id));
    FileChannel ch = FileChannel.open(path, Set.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
        StandardOpenOption.WRITE), dev.flatpull.core.OwnerOnly.file());
    return new PackFile(id, path, ch, 0, new ArrayList<>());
  }

  /** A file an earlier process wrote: read only, opened when first read. */
  static PackFile found(Path path, long id, long size) {
    return new PackFile(id, path, null, size, null);
  }

  boolean open() {
    return appended != null;
  }

  /** Appends a record at the end; on failure nothing counts (the next append writes over what this left). */
  Record append(Digest digest, byte[] content) throws IOException {
    ByteBuffer header = ByteBuffer.allocate(HEADER).putInt(RECORD_MAGIC).putInt(content.length).put(digest.raw());
    writeFully(header.flip(), size);
    writeFully(ByteBuffer.wrap(content), size + HEADER);
    Record r = new Record(digest, size + HEADER, content.length);
    size += HEADER + content.length;
    appended.add(r);
    return r;
  }

  /**
   * Writes the index of what was appended and takes no more appends. A failure leaves the file unsealed, which the
   * next process reads record by record: a cost, never a wrong byte.
   */
  void seal() throws IOException {
    List<Record> records = appended;
    appended = null;
    ByteBuffer index = ByteBuffer.allocate(records.size() * INDEX_ENTRY + TAIL);
    for (Record r : records) {
      index.put(r.digest().raw()).putLong(r.offset()).putInt(r.length());
    }
    index.putInt(records.size());
    CRC32C crc = new CRC32C();
    crc.update(index.array(), 0, index.position());
    index.putInt((int) crc.getValue()).putLong(INDEX_MAGIC);
    writeFully(index.flip(), size);
    size += index.capacity();
  }

  /** The records of the file: its index when sealed and intact, else those found whole from its start. */
  List<Record> records() throws IOException {
    List<Record> indexed = indexed();
    return indexed != null ? indexed : scanned();
  }

  private List<Record> indexed() throws IOException {
    if (size < TAIL) {
      return null;
    }
    ByteBuffer tail = ByteBuffer.allocate(TAIL);
    if (!readFully(tail, size - TAIL) || tail.getLong(8) != INDEX_MAGIC) {
      return null;
    }
    int count = tail.getInt(0);
    long start = size - TAIL - (long) count * INDEX_ENTRY;
    if (count < 0 || start < 0) {
      return null;
    }
    ByteBuffer index = ByteBuffer.allocate(count * INDEX_ENTRY + 4);
    if (!readFully(index, start)) {
      return null;
    }
    CRC32C crc = new CRC32C();
    crc.update(index.array(), 0, index.capacity());
    if ((int) crc.getValue() != tail.getInt(4)) {
      return null;
    }
    List<Record> records = new ArrayList<>(count);
    byte[] digest = new byte[32];
    index.flip();
    for (int i = 0; i < count; i++) {
      index.get(digest);
      long offset = index.getLong();
      int length = index.getInt();
      if (offset < HEADER || length < 0 || offset + length > start) {
        return null;
      }
      records.add(new Record(Digest.ofRaw("sha256", digest), offset, length));
    }
    return records;
  }

  private List<Record> scanned() throws IOException {
    List<Record> records = new ArrayList<>();
    ByteBuffer header = ByteBuffer.allocate(HEADER);
    byte[] digest = new byte[32];
    long at = 0;
    while (at + HEADER <= size) {
      header.clear();
      if (!readFully(header, at) || header.getInt(0) != RECORD_MAGIC) {
        break;
      }
      int length = header.getInt(4);
      if (length < 0 || at + HEADER + length > size) {
        break;
      }
      header.position(8).get(digest);
      records.add(new Record(Digest.ofRaw("sha256", digest), at + HEADER, length));
      at += HEADER + length;
    }
    return records;
  }

  /**
   * Reads {@code into} whole from {@code offset}; false when the file is gone or shorter (the entry is lost, not
   * wrong). A channel another thread's interrupt closed is opened again.
   */
  boolean read(byte[] into, long offset) throws IOException {
    return readFully(ByteBuffer.wrap(into), offset);
  }

  private boolean readFully(ByteBuffer buf, long offset) throws IOException {
    for (int attempt = 0; ; attempt++) {
      FileChannel ch = channel();
      if (ch == null) {
        return false;
      }
      try {
        long at = offset + buf.position();
        while (buf.hasRemaining()) {
          int n = ch.read(buf, at);
          if (n < 0) {
            return false;
          }
          at += n;
        }
        return true;
      } catch (ClosedByInterruptException e) {
        throw new InterruptedIOException("interrupted reading the page cache");
      } catch (ClosedChannelException e) {
        if (attempt > 0) {
          throw e;
        }
      }
    }
  }

  private void writeFully(ByteBuffer buf, long offset) throws IOException {
    FileChannel ch = channel();
    if (ch == null) {
      throw new NoSuchFileException(path.toString());
    }
    long at = offset;
    while (buf.hasRemaining()) {
      at += ch.write(buf, at);
    }
  }

  /** The open channel, opened (again) if needed; null once the file is deleted or gone. */
  private FileChannel channel() throws IOException {
    FileChannel ch = channel;
    if (ch != null && ch.isOpen()) {
      return ch;
    }
    synchronized (this) {
      if (deleted) {
        return null;
      }
      if (channel == null || !channel.isOpen()) {
        try {
          channel = appended != null
              ? FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE)
              : FileChannel.open(path, StandardOpenOption.READ);
        } catch (NoSuchFileException gone) {
          deleted = true;
          return null;
        }
      }
      return channel;
    }
  }

  /** Closes and deletes the file; a read under way finds it gone. */
  synchronized void delete() throws IOException {
    deleted = true;
    if (channel != null) {
      channel.close();
    }
    java.nio.file.Files.deleteIfExists(path);
  }

  /** Closes the file (it stays on disk). */
  synchronized void close() throws IOException {
    if (channel != null) {
      channel.close();
    }
  }
}
