package dev.flatpull.fetcher.registry;

import java.io.IOException;

/**
 * A registry did not give what was asked. Subclasses say why; all carry the URL and, when a response arrived, its HTTP
 * status (else 0) so that the message is evidence enough to act on.
 */
public class RegistryException extends IOException {
  private final String url;
  private final int status;

  public RegistryException(String message, String url, int status, Throwable cause) {
    super(message + " [" + url + (status > 0 ? ", HTTP " + status : "") + "]", cause);
    this.url = url;
    this.status = status;
  }

  public String url() {
    return url;
  }

  /** The HTTP status of the failing response, or 0 when none arrived. */
  public int status() {
    return status;
  }
}
