package dev.flatpull.core;

import java.io.IOException;

/** Content did not hash to the digest that vouches for it; the content must not be used. */
public final class DigestMismatchException extends IOException {
  private final String subject;
  private final Digest expected;
  private final Digest actual;

  public DigestMismatchException(String subject, Digest expected, Digest actual) {
    super(subject + " has digest " + actual + ", but " + expected + " was expected");
    this.subject = subject;
    this.expected = expected;
    this.actual = actual;
  }

  public String subject() {
    return subject;
  }

  public Digest expected() {
    return expected;
  }

  public Digest actual() {
    return actual;
  }
}
