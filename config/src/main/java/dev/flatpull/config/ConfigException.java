package dev.flatpull.config;

/** A configuration file is unreadable or invalid. The message names the file, the key and the reason. */
public final class ConfigException extends Exception {
  private final String file;
  private final String key;

  public ConfigException(String file, String key, String reason) {
    this(file, key, reason, null);
  }

  public ConfigException(String file, String key, String reason, Throwable cause) {
    super(file + (key == null || key.isEmpty() ? "" : ": key '" + key + "'") + ": " + reason, cause);
    this.file = file;
    this.key = key;
  }

  public String file() {
    return file;
  }

  /** The dotted key at fault, or empty when the whole file is. */
  public String key() {
    return key == null ? "" : key;
  }
}
