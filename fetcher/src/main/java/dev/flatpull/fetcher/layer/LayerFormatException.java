package dev.flatpull.fetcher.layer;

import java.io.IOException;

/** A layer's footer, TOC or tar stream is malformed; the message names the layer and what is wrong. */
public final class LayerFormatException extends IOException {
  public LayerFormatException(String message) {
    super(message);
  }

  public LayerFormatException(String message, Throwable cause) {
    super(message, cause);
  }
}
