package dev.flatpull.config;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.dataformat.toml.TomlMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One table of a parsed TOML file with typed, validated accessors. Every accessor takes a default, records the key as
 * known, and reports a wrong type as a {@link ConfigException} naming file and dotted key; {@link #rejectUnknownKeys()}
 * then catches typos, which would otherwise silently fall back to defaults.
 */
final class TomlTable {
  private static final TomlMapper MAPPER = new TomlMapper();
  private static final Pattern SIZE = Pattern.compile("(\\d+)\\s*([KMGT]i?B|B)?", Pattern.CASE_INSENSITIVE);
  private static final Pattern DURATION = Pattern.compile("(\\d+)\\s*(ms|s|m|h)");

  private final String file;
  private final String prefix;
  private final ObjectNode node;
  private final Set<String> known = new LinkedHashSet<>();

  private TomlTable(String file, String prefix, ObjectNode node) {
    this.file = file;
    this.prefix = prefix;
    this.node = node;
  }

  static TomlTable parse(Path path) throws ConfigException {
    String file = path.toString();
    try {
      return parse(file, Files.readString(path));
    } catch (NoSuchFileException e) {
      throw new ConfigException(file, "", "file does not exist");
    } catch (IOException e) {
      throw new ConfigException(file, "", "cannot be read: " + e.getMessage(), e);
    }
  }

  static TomlTable parse(String file, String text) throws ConfigException {
    try {
      JsonNode tree = MAPPER.readTree(text);
      if (tree == null || tree.isMissingNode()) {
        tree = MAPPER.createObjectNode();
      }
      return new TomlTable(file, "", (ObjectNode) tree);
    } catch (IOException e) {
      throw new ConfigException(file, "", "is not valid TOML: " + firstLine(e.getMessage()), e);
    }
  }

  private static String firstLine(String message) {
    if (message == null) {
      return "parse error";
    }
    int nl = message.indexOf('\n');
    return nl < 0 ? message : message.substring(0, nl);
  }

  String file() {
    return file;
  }

  String keyPath(String key) {
    return prefix.isEmpty() ? key : prefix + "." + key;
  }

  private JsonNode value(String key) {
    known.add(key);
    JsonNode v = node.get(key);
    return v == null || v.isNull() ? null : v;
  }

  ConfigException invalid(String key, String reason) {
    return new ConfigException(file, keyPath(key), reason);
  }

  boolean has(String key) {
    return node.has(key);
  }

  /** A sub-table; absent means empty. */
  TomlTable table(String key) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return new TomlTable(file, keyPath(key), MAPPER.createObjectNode());
    }
    if (!v.isObject()) {
      throw invalid(key, "must be a table");
    }
    return new TomlTable(file, keyPath(key), (ObjectNode) v);
  }

  /** The keys of this table whose values are tables, in file order (e.g. {@code [host."https://mirror"]}). */
  Map<String, TomlTable> subTables(String key) throws ConfigException {
    TomlTable t = table(key);
    Map<String, TomlTable> out = new LinkedHashMap<>();
    for (Iterator<String> it = t.node.fieldNames(); it.hasNext(); ) {
      String name = it.next();
      out.put(name, t.table(name));
    }
    return out;
  }

  String string(String key, String fallback) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return fallback;
    }
    if (!v.isTextual()) {
      throw invalid(key, "must be a string, found " + v.getNodeType().name().toLowerCase(Locale.ROOT));
    }
    return v.asText();
  }

  boolean bool(String key, boolean fallback) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return fallback;
    }
    if (!v.isBoolean()) {
      throw invalid(key, "must be true or false");
    }
    return v.asBoolean();
  }

  long integer(String key, long fallback, long min, long max) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return fallback;
    }
    if (!v.isIntegralNumber()) {
      throw invalid(key, "must be an integer");
    }
    return inRange(key, v.asLong(), min, max);
  }

  private long inRange(String key, long value, long min, long max) throws ConfigException {
    if (value < min || value > max) {
      throw invalid(key, "must be between " + min + " and " + max + ", found " + value);
    }
    return value;
  }

  /** A byte size: an integer, or a string such as {@code "64MiB"} (KiB, MiB, GiB, TiB; KB... mean the same). */
  long bytes(String key, long fallback, long min, long max) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return fallback;
    }
    if (v.isIntegralNumber()) {
      return inRange(key, v.asLong(), min, max);
    }
    Matcher m = v.isTextual() ? SIZE.matcher(v.asText().trim()) : null;
    if (m == null || !m.matches()) {
      throw invalid(key, "must be a byte size such as 65536 or \"64MiB\"");
    }
    long n = Long.parseLong(m.group(1));
    String unit = m.group(2) == null ? "B" : m.group(2).toUpperCase(Locale.ROOT);
    int shift =
        switch (unit.charAt(0)) {
          case 'K' -> 10;
          case 'M' -> 20;
          case 'G' -> 30;
          case 'T' -> 40;
          default -> 0;
        };
    if (n > (Long.MAX_VALUE >> shift)) {
      throw invalid(key, "is too large");
    }
    return inRange(key, n << shift, min, max);
  }

  /** A share: a number greater than 0 and at most 1, such as {@code 0.75}. */
  double share(String key, double fallback) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return fallback;
    }
    if (!v.isNumber() || !(v.asDouble() > 0) || v.asDouble() > 1) {
      throw invalid(key, "must be a number greater than 0 and at most 1, such as 0.75");
    }
    return v.asDouble();
  }

  /** A duration string such as {@code "250ms"}, {@code "30s"}, {@code "5m"}, {@code "1h"}. */
  Duration duration(String key, Duration fallback) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return fallback;
    }
    Matcher m = v.isTextual() ? DURATION.matcher(v.asText().trim()) : null;
    if (m == null || !m.matches()) {
      throw invalid(key, "must be a duration such as \"250ms\", \"30s\", \"5m\" or \"1h\"");
    }
    long n = Long.parseLong(m.group(1));
    return switch (m.group(2)) {
      case "ms" -> Duration.ofMillis(n);
      case "s" -> Duration.ofSeconds(n);
      case "m" -> Duration.ofMinutes(n);
      default -> Duration.ofHours(n);
    };
  }

  List<String> strings(String key, List<String> fallback) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return fallback;
    }
    if (v.isTextual()) {
      return List.of(v.asText());
    }
    if (!v.isArray()) {
      throw invalid(key, "must be an array of strings");
    }
    List<String> out = new ArrayList<>();
    for (JsonNode item : v) {
      if (!item.isTextual()) {
        throw invalid(key, "must be an array of strings");
      }
      out.add(item.asText());
    }
    return List.copyOf(out);
  }

  /**
   * containerd's {@code client} key: a string (one file holding certificate and key), or an array of such strings
   * and of {@code [certificate, key]} pairs. Each element is a list of one or two strings.
   */
  List<List<String>> stringPairs(String key) throws ConfigException {
    JsonNode v = value(key);
    if (v == null) {
      return List.of();
    }
    if (v.isTextual()) {
      return List.of(List.of(v.asText()));
    }
    if (!v.isArray()) {
      throw invalid(key, "must be a path or an array of paths and [certificate, key] pairs");
    }
    List<List<String>> out = new ArrayList<>();
    for (JsonNode item : v) {
      if (item.isTextual()) {
        out.add(List.of(item.asText()));
      } else if (item.isArray() && item.size() == 2 && item.get(0).isTextual() && item.get(1).isTextual()) {
        out.add(List.of(item.get(0).asText(), item.get(1).asText()));
      } else {
        throw invalid(key, "must be a path or an array of paths and [certificate, key] pairs");
      }
    }
    return List.copyOf(out);
  }

  /** A table whose values are strings or arrays of strings (HTTP headers). */
  Map<String, List<String>> stringLists(String key) throws ConfigException {
    TomlTable t = table(key);
    Map<String, List<String>> out = new LinkedHashMap<>();
    for (Iterator<String> it = t.node.fieldNames(); it.hasNext(); ) {
      String name = it.next();
      out.put(name, t.strings(name, List.of()));
    }
    return out;
  }

  /** Fails on any key that no accessor asked for: a misspelt key must not silently mean "use the default". */
  void rejectUnknownKeys() throws ConfigException {
    for (Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
      String name = it.next();
      if (!known.contains(name)) {
        throw new ConfigException(file, keyPath(name), "unknown key (known here: " + String.join(", ", known) + ")");
      }
    }
  }
}
