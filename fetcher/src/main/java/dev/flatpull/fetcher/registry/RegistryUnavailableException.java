package dev.flatpull.fetcher.registry;

/** Every attempt failed with a transient error (connection reset, timeout, truncated body, 5xx, 429); the cause is the last one. */
public final class RegistryUnavailableException extends RegistryException {
  public RegistryUnavailableException(String message, String url, int status, Throwable cause) {
    super(message, url, status, cause);
  }
}
