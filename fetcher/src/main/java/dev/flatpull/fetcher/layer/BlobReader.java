package dev.flatpull.fetcher.layer;

import dev.flatpull.core.ByteRange;
import dev.flatpull.fetcher.registry.RegistryClient;
import java.io.ByteArrayInputStream;
import java.io.IOException;

/** Reads byte ranges of one blob: the seam between layer formats and where the blob lives (registry or local file). */
@FunctionalInterface
public interface BlobReader {
  /** Exactly the bytes of {@code range}, unverified. */
  byte[] read(ByteRange range) throws IOException;

  /**
   * Hands the bytes of {@code range} to {@code reader} as they arrive, so that the chunks at its start can be used
   * before its end has crossed the link. A reader reads no more than the range's length; after a transport failure an
   * implementation may call it again from the range's start. This default has all of them at once.
   */
  default <T> T stream(ByteRange range, RegistryClient.RangeReader<T> reader) throws IOException {
    return reader.read(new ByteArrayInputStream(read(range)));
  }

  /** The blob {@code digest} of {@code client}'s repository, read range by range, streamed as it arrives. */
  static BlobReader of(RegistryClient client, dev.flatpull.core.Digest digest) {
    return new BlobReader() {
      @Override
      public byte[] read(ByteRange range) throws IOException {
        return client.readRange(digest, range);
      }

      @Override
      public <T> T stream(ByteRange range, RegistryClient.RangeReader<T> reader) throws IOException {
        return client.streamRange(digest, range, reader);
      }
    };
  }
}
