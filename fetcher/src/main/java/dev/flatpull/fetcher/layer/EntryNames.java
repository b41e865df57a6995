package dev.flatpull.fetcher.layer;

/** Cleans entry names from TOCs and tar headers, refusing those that could escape the layer root. */
final class EntryNames {
  private EntryNames() {}

  /**
   * The clean relative name of {@code raw}.
   *
   * @throws LayerFormatException for empty or absolute names, {@code ..} components and NUL characters
   */
  static String clean(String raw, Object where) throws LayerFormatException {
    if (raw == null || raw.isEmpty()) {
      throw new LayerFormatException(where + ": entry without a name");
    }
    if (raw.indexOf('\0') >= 0) {
      throw new LayerFormatException(where + ": entry name contains NUL: '" + raw.replace('\0', '?') + "'");
    }
    if (raw.startsWith("/")) {
      throw new LayerFormatException(where + ": absolute entry name '" + raw + "'");
    }
    if (isClean(raw)) {
      return raw;
    }
    // A directory's trailing slash, a leading "./": the usual unclean names, cleaned without splitting.
    int from = raw.startsWith("./") ? 2 : 0;
    int to = raw.length();
    while (to > from && raw.charAt(to - 1) == '/') {
      to--;
    }
    String cut = to > from ? raw.substring(from, to) : "";
    if (!cut.isEmpty() && isClean(cut)) {
      return cut;
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

  /** Most names are already clean; checking that in one pass avoids splitting every name of a large TOC. */
  private static boolean isClean(String s) {
    int n = s.length();
    if (s.charAt(n - 1) == '/') {
      return false;
    }
    int start = 0;
    for (int i = 0; i <= n; i++) {
      if (i == n || s.charAt(i) == '/') {
        int len = i - start;
        if (len == 0 || (len == 1 && s.charAt(start) == '.') || (len == 2 && s.charAt(start) == '.' && s.charAt(start + 1) == '.')) {
          return false;
        }
        start = i + 1;
      }
    }
    return true;
  }
}
