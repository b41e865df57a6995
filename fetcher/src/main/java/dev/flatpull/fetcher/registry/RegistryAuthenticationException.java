package dev.flatpull.fetcher.registry;

/** The registry refused our credentials or we have none it accepts (401/403 after the challenge flow). */
public final class RegistryAuthenticationException extends RegistryException {
  public RegistryAuthenticationException(String message, String url, int status, Throwable cause) {
    super(message, url, status, cause);
  }
}
