package dev.flatpull.fetcher.registry;

/** The registry answered in a way the distribution spec does not allow: a wrong Content-Range, an unexpected status, a missing header. */
public final class RegistryProtocolException extends RegistryException {
  public RegistryProtocolException(String message, String url, int status, Throwable cause) {
    super(message, url, status, cause);
  }
}
