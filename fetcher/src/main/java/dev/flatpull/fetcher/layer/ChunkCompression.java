package dev.flatpull.fetcher.layer;

/** How the bytes of a chunk are stored in the blob it is read from. */
public enum ChunkCompression {
  /** One or more gzip members (eStargz). */
  GZIP,
  /** One or more zstd frames (zstd:chunked). */
  ZSTD,
  /** Stored as is (a locally decompressed plain layer). */
  NONE,
  /** A hole: zeros not stored anywhere (zstd:chunked {@code chunkType: zeros}). */
  ZEROS
}
