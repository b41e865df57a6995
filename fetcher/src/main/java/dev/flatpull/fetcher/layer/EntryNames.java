package dev.flatpull.fetcher.layer;

/** Cleans entry names from TOCs and tar headers, refusing those that could escape the layer root. */
final class EntryNames {
  private EntryNames() {}

  /**
   * The clean relative name of {@code raw}.
   *
   * @throws LayerFormatException for empty or absolute names, {@code ..} components and NUL characters
   */
  static String clean(String raw, String where) throws LayerFormatException {
    if (raw == null || raw.isEmpty()) {
      throw new LayerFormatException(where + ": entry without a name");
    }
    if (raw.indexOf('\0') >= 0) {
      throw new LayerFormatException(where + ": entry name contains NUL: '" + raw.replace('\0', '?') + "'");
    }
    if (raw.startsWith("/")) {
      throw new LayerFormatException(where + ": absolute entry name '" + raw + "'");
    }
    StringBuilder out = new StringBuilder(raw.length());
    for (String part : raw.split("/")) {
      if (part.isEmpty() || part.equals(".")) {
        continue;
      }
      if (part.equals("..")) {
        throw new LayerFormatException(where + ": entry name '" + raw + "' escapes the layer with '..'");
      }
      if (out.length() > 0) {
        out.append('/');
      }
      out.append(part);
    }
    return out.toString();
  }
}
