package dev.flatpull.fetcher.oci;

import java.io.IOException;

/** A document or layer has a media type flatpull does not understand. */
public final class UnsupportedMediaTypeException extends IOException {
  private final String mediaType;

  public UnsupportedMediaTypeException(String what, String mediaType) {
    super("unsupported " + what + " media type '" + mediaType + "'");
    this.mediaType = mediaType;
  }

  public String mediaType() {
    return mediaType;
  }
}
