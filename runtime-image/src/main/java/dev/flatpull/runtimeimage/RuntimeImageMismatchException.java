package dev.flatpull.runtimeimage;

import java.io.IOException;

/**
 * A runtime image, or a trace to build one from, that does not fit the image it claims: another manifest, a layer or
 * file the image does not have, content beyond a file's end, an extent that is not a chunk of the named layer. The
 * message names the field and the reason. Nothing of such a runtime image is served.
 */
public class RuntimeImageMismatchException extends IOException {
  private static final long serialVersionUID = 1L;

  public RuntimeImageMismatchException(String message) {
    super(message);
  }
}
