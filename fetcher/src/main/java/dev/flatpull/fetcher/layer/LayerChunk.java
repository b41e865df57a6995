package dev.flatpull.fetcher.layer;

import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;

/**
 * One verifiable piece of a regular file: {@code size} decompressed bytes at {@code fileOffset} of the file, found by
 * decompressing the blob range {@code stored} and skipping {@code innerOffset} bytes; they must hash to
 * {@code digest}.
 */
public record LayerChunk(long fileOffset, long size, ByteRange stored, long innerOffset, Digest digest) {
  public LayerChunk {
    if (fileOffset < 0 || size < 0 || innerOffset < 0) {
      throw new IllegalArgumentException("negative chunk offset or size");
    }
  }

  public long fileEnd() {
    return fileOffset + size;
  }
}
