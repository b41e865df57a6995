package dev.flatpull.core;

/**
 * A half-open range {@code [offset, offset + length)} of bytes in a blob or file.
 *
 * <p>Validated at construction: a negative offset or length, or an end beyond {@link Long#MAX_VALUE}, is a bug or
 * hostile input and fails immediately.
 */
public record ByteRange(long offset, long length) {
  public ByteRange {
    if (offset < 0 || length < 0 || offset > Long.MAX_VALUE - length) {
      throw new IllegalArgumentException("invalid byte range offset=" + offset + " length=" + length);
    }
  }

  public static ByteRange between(long start, long endExclusive) {
    return new ByteRange(start, endExclusive - start);
  }

  /** The first offset past the range. */
  public long end() {
    return offset + length;
  }

  public boolean isEmpty() {
    return length == 0;
  }

  /** The HTTP {@code Range} header value selecting this range ({@code bytes=first-last}, inclusive). */
  public String httpRangeHeader() {
    if (length == 0) {
      throw new IllegalStateException("an empty range cannot be requested over HTTP");
    }
    return "bytes=" + offset + "-" + (end() - 1);
  }

  @Override
  public String toString() {
    return "[" + offset + ", " + end() + ")";
  }
}
