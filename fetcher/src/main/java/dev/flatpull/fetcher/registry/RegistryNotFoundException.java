package dev.flatpull.fetcher.registry;

/** The registry does not have the manifest, blob or repository (404, MANIFEST_UNKNOWN, BLOB_UNKNOWN). */
public final class RegistryNotFoundException extends RegistryException {
  public RegistryNotFoundException(String message, String url, int status, Throwable cause) {
    super(message, url, status, cause);
  }
}
