package dev.flatpull.core;

import java.io.IOException;

/**
 * Input grew past a configured limit (a decompression bomb, an oversized TOC or manifest); reading stopped there.
 */
public final class SizeLimitExceededException extends IOException {
  private final String subject;
  private final long limit;

  public SizeLimitExceededException(String subject, long limit) {
    super(subject + " exceeds the limit of " + limit + " bytes");
    this.subject = subject;
    this.limit = limit;
  }

  public String subject() {
    return subject;
  }

  public long limit() {
    return limit;
  }
}
