package dev.flatpull.fetcher.convert;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.function.LongConsumer;

/** Tells {@code consumed} how many bytes have been read (or skipped) so far, after each read: a step's progress. */
final class CountingInputStream extends FilterInputStream {
  private final LongConsumer consumed;
  private long count;

  CountingInputStream(InputStream in, LongConsumer consumed) {
    super(in);
    this.consumed = consumed;
  }

  @Override
  public int read() throws IOException {
    int b = super.read();
    if (b >= 0) {
      consumed.accept(++count);
    }
    return b;
  }

  @Override
  public int read(byte[] b, int off, int len) throws IOException {
    int n = super.read(b, off, len);
    if (n > 0) {
      consumed.accept(count += n);
    }
    return n;
  }

  @Override
  public long skip(long n) throws IOException {
    long skipped = super.skip(n);
    if (skipped > 0) {
      consumed.accept(count += skipped);
    }
    return skipped;
  }
}
