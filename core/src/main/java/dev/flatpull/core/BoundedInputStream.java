package dev.flatpull.core;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;

/**
 * Passes bytes through until more than {@code limit} have been read, then fails with
 * {@link SizeLimitExceededException}: the guard against decompression bombs, applied to every decompressing reader.
 */
public final class BoundedInputStream extends FilterInputStream {
  private final String subject;
  private final long limit;
  private long count;

  public BoundedInputStream(InputStream in, String subject, long limit) {
    super(in);
    this.subject = subject;
    this.limit = limit;
  }

  @Override
  public int read() throws IOException {
    int b = super.read();
    if (b >= 0) {
      count(1);
    }
    return b;
  }

  @Override
  public int read(byte[] b, int off, int len) throws IOException {
    int n = super.read(b, off, len);
    if (n > 0) {
      count(n);
    }
    return n;
  }

  @Override
  public long skip(long n) throws IOException {
    long skipped = super.skip(n);
    count(skipped);
    return skipped;
  }

  private void count(long n) throws SizeLimitExceededException {
    count += n;
    if (count > limit) {
      throw new SizeLimitExceededException(subject, limit);
    }
  }

  /** Bytes read so far. */
  public long count() {
    return count;
  }
}
