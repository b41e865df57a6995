package dev.flatpull.trace;

import java.io.IOException;

/** A trace file that cannot be used: truncated, not a trace, a newer format, or inconsistent; says where and why. */
public final class TraceFormatException extends IOException {
  private static final long serialVersionUID = 1L;

  public TraceFormatException(String message) {
    super(message);
  }

  public TraceFormatException(String message, Throwable cause) {
    super(message, cause);
  }
}
