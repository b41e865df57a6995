package dev.flatpull.fetcher.registry;

/**
 * An endpoint answered a range read far into a blob with the whole blob, and another endpoint can serve the range:
 * the response was given up unread, because reading through to the range would move most of the blob (a footer or a
 * TOC sits at its end).
 */
public final class RangeIgnoredException extends RegistryException {
  public RangeIgnoredException(String message, String url) {
    super(message, url, 200, null);
  }
}
