package dev.flatpull.fetcher.oci;

import java.io.IOException;

/** A manifest, index or image config is not well-formed; the message says where and why. */
public final class ManifestFormatException extends IOException {
  public ManifestFormatException(String message) {
    super(message);
  }

  public ManifestFormatException(String message, Throwable cause) {
    super(message, cause);
  }
}
