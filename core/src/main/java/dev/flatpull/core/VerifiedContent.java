package dev.flatpull.core;

import java.util.Objects;

/**
 * Bytes together with the digest they were checked against. The only ways to make one hash the bytes, so holding one
 * is proof of verification: code that receives it (the page cache) need not hash the same bytes again.
 */
public final class VerifiedContent {
  private final Digest digest;
  private final byte[] bytes;

  private VerifiedContent(Digest digest, byte[] bytes) {
    this.digest = digest;
    this.bytes = bytes;
  }

  /**
   * Checks {@code bytes} against {@code expected}.
   *
   * @param subject what the bytes are, for the error message
   * @throws DigestMismatchException when they do not match
   */
  public static VerifiedContent check(Digest expected, String subject, byte[] bytes) throws DigestMismatchException {
    Objects.requireNonNull(bytes, "bytes");
    expected.verify(subject, bytes, 0, bytes.length);
    return new VerifiedContent(expected, bytes);
  }

  /** Content whose SHA-256 digest is computed here (for content defined, not fetched, such as a hole of zeros). */
  public static VerifiedContent of(byte[] bytes) {
    return new VerifiedContent(Digest.sha256(bytes), bytes);
  }

  public Digest digest() {
    return digest;
  }

  /** The verified bytes; callers must not modify them. */
  public byte[] bytes() {
    return bytes;
  }
}
