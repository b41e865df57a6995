package dev.flatpull.fetcher.layer;

import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import java.nio.ByteBuffer;
import java.util.Objects;

/**
 * One verifiable piece of a regular file: {@code size} decompressed bytes at {@code fileOffset} of the file, found by
 * decompressing the blob range {@code stored} and skipping {@code innerOffset} bytes; they must hash to
 * {@code digest}. A value: equal when every part is.
 *
 * <p>A class, not a record, so that the stored range can be kept as two longs rather than an object of its own: an
 * index holds one of these per chunk, a million for a large layer (docs/benchmarks.md, index memory).
 */
public final class LayerChunk {
  private final long fileOffset;
  private final long size;
  private final long storedOffset;
  private final long storedLength;
  private final long innerOffset;
  private final Digest digest;

  public LayerChunk(long fileOffset, long size, ByteRange stored, long innerOffset, Digest digest) {
    if (fileOffset < 0 || size < 0 || innerOffset < 0) {
      throw new IllegalArgumentException("negative chunk offset or size");
    }
    this.fileOffset = fileOffset;
    this.size = size;
    this.storedOffset = stored.offset();
    this.storedLength = stored.length();
    this.innerOffset = innerOffset;
    this.digest = digest;
  }

  public long fileOffset() {
    return fileOffset;
  }

  public long size() {
    return size;
  }

  /** The blob range to fetch and decompress. */
  public ByteRange stored() {
    return new ByteRange(storedOffset, storedLength);
  }

  /** Where {@link #stored()} starts, without making the range: reads and the TOC's parse ask for it per chunk. */
  public long storedOffset() {
    return storedOffset;
  }

  /** Where {@link #stored()} ends. */
  public long storedEnd() {
    return storedOffset + storedLength;
  }

  /** {@link #stored()}'s length: 0 for a hole. */
  public long storedLength() {
    return storedLength;
  }

  public long innerOffset() {
    return innerOffset;
  }

  /** The digest of the decompressed bytes; null only for a hole (an empty stored range). */
  public Digest digest() {
    return digest;
  }

  public long fileEnd() {
    return fileOffset + size;
  }

  /**
   * Copies what of this chunk's {@code bytes} (its whole content) lies in the file's range {@code [offset, offset +
   * length)} to {@code dst}, where that range starts at {@code dstOffset}: every read of a file is assembled so.
   *
   * @return the bytes copied
   */
  public int copyInto(byte[] bytes, long offset, int length, byte[] dst, int dstOffset) {
    return copyInto(bytes, offset, length, ByteBuffer.wrap(dst), dstOffset);
  }

  /**
   * The same into a buffer, at its absolute index {@code dstIndex} (its position untouched): a FUSE engine copies a
   * read straight into the answer it writes to the kernel.
   */
  public int copyInto(byte[] bytes, long offset, int length, ByteBuffer dst, int dstIndex) {
    long from = Math.max(offset, fileOffset);
    long to = Math.min(offset + length, fileEnd());
    if (to <= from) {
      return 0;
    }
    dst.put(dstIndex + (int) (from - offset), bytes, (int) (from - fileOffset), (int) (to - from));
    return (int) (to - from);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof LayerChunk c && c.fileOffset == fileOffset && c.size == size && c.storedOffset == storedOffset
        && c.storedLength == storedLength && c.innerOffset == innerOffset && Objects.equals(c.digest, digest);
  }

  @Override
  public int hashCode() {
    // By hand: Objects.hash boxed five longs per call, and a TOC's parse hashes every chunk.
    long h = fileOffset;
    h = 31 * h + size;
    h = 31 * h + storedOffset;
    h = 31 * h + storedLength;
    h = 31 * h + innerOffset;
    return 31 * Long.hashCode(h) + Objects.hashCode(digest);
  }

  @Override
  public String toString() {
    return "LayerChunk[fileOffset=" + fileOffset + ", size=" + size + ", stored=" + stored() + ", innerOffset="
        + innerOffset + ", digest=" + digest + "]";
  }
}
