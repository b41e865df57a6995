package dev.flatpull.runtimeimage;

import java.io.IOException;

/**
 * A runtime image was not derived from an older version's: the new image has less of the old trace's content than
 * the caller's threshold asks. Nothing was published; record the new version instead.
 */
public class RuntimeImageOverlapException extends IOException {
  private static final long serialVersionUID = 1L;

  public RuntimeImageOverlapException(String message) {
    super(message);
  }
}
