package dev.flatpull.runtimeimage;

import java.io.IOException;

/**
 * A runtime image that cannot be read: not one, truncated, of a newer version, or inconsistent with itself (an index
 * out of range, overlapping extents). The message names the byte offset or the field, and the reason.
 */
public class RuntimeImageFormatException extends IOException {
  private static final long serialVersionUID = 1L;

  public RuntimeImageFormatException(String message) {
    super(message);
  }

  public RuntimeImageFormatException(String message, Throwable cause) {
    super(message, cause);
  }
}
