package dev.flatpull.fetcher.registry;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;

/**
 * A parsed {@code WWW-Authenticate} header: {@code Bearer realm="...",service="...",scope="..."} or
 * {@code Basic realm="..."}.
 */
record AuthChallenge(String scheme, Map<String, String> params) {

  static Optional<AuthChallenge> parse(String header) {
    if (header == null || header.isBlank()) {
      return Optional.empty();
    }
    String h = header.trim();
    int sp = h.indexOf(' ');
    String scheme = (sp < 0 ? h : h.substring(0, sp)).toLowerCase(Locale.ROOT);
    Map<String, String> params = new LinkedHashMap<>();
    int i = sp < 0 ? h.length() : sp + 1;
    while (i < h.length()) {
      while (i < h.length() && (h.charAt(i) == ' ' || h.charAt(i) == ',')) {
        i++;
      }
      int eq = h.indexOf('=', i);
      if (eq < 0) {
        break;
      }
      String key = h.substring(i, eq).trim().toLowerCase(Locale.ROOT);
      i = eq + 1;
      String value;
      if (i < h.length() && h.charAt(i) == '"') {
        StringBuilder sb = new StringBuilder();
        i++;
        while (i < h.length() && h.charAt(i) != '"') {
          if (h.charAt(i) == '\\' && i + 1 < h.length()) {
            i++;
          }
          sb.append(h.charAt(i++));
        }
        i++;
        value = sb.toString();
      } else {
        int end = h.indexOf(',', i);
        end = end < 0 ? h.length() : end;
        value = h.substring(i, end).trim();
        i = end;
      }
      params.put(key, value);
    }
    return Optional.of(new AuthChallenge(scheme, Map.copyOf(params)));
  }

  boolean isBearer() {
    return scheme.equals("bearer");
  }

  boolean isBasic() {
    return scheme.equals("basic");
  }

  Optional<String> param(String key) {
    return Optional.ofNullable(params.get(key));
  }
}
