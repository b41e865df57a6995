package dev.flatpull.fetcher.layer;

import dev.flatpull.core.ByteRange;
import java.io.IOException;

/** Reads byte ranges of one blob: the seam between layer formats and where the blob lives (registry or local file). */
@FunctionalInterface
public interface BlobReader {
  /** Exactly the bytes of {@code range}, unverified. */
  byte[] read(ByteRange range) throws IOException;
}
