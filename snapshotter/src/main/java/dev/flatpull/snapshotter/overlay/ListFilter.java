package dev.flatpull.snapshotter.overlay;

import dev.flatpull.snapshotter.store.Snapshot;
import dev.flatpull.snapshotter.store.SnapshotException;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.function.Predicate;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * The part of containerd's filter language that snapshot listings use: selectors {@code name}, {@code parent},
 * {@code kind} and {@code labels.KEY} (or {@code labels."KEY"}), operators {@code ==}, {@code !=}, {@code ~=} (regular
 * expression) or none (the field is present), values bare or double-quoted. Selectors joined by commas must all
 * match; a snapshot is listed when any one filter matches (all when there are none).
 */
public final class ListFilter {
  private final List<List<Predicate<Snapshot>>> anyOf;

  private ListFilter(List<List<Predicate<Snapshot>>> anyOf) {
    this.anyOf = anyOf;
  }

  public static final ListFilter ALL = new ListFilter(List.of());

  public static ListFilter parse(List<String> filters) throws SnapshotException {
    List<List<Predicate<Snapshot>>> any = new ArrayList<>();
    for (String f : filters) {
      if (f.isBlank()) {
        continue;
      }
      List<Predicate<Snapshot>> all = new ArrayList<>();
      for (String selector : splitOutsideQuotes(f)) {
        all.add(selector(f, selector.trim()));
      }
      any.add(all);
    }
    return new ListFilter(any);
  }

  public boolean matches(Snapshot s) {
    return anyOf.isEmpty() || anyOf.stream().anyMatch(all -> all.stream().allMatch(p -> p.test(s)));
  }

  private static Predicate<Snapshot> selector(String filter, String sel) throws SnapshotException {
    int op = -1;
    String operator = null;
    for (String o : new String[] {"==", "!=", "~="}) {
      int i = indexOutsideQuotes(sel, o);
      if (i >= 0 && (op < 0 || i < op)) {
        op = i;
        operator = o;
      }
    }
    String field = (op < 0 ? sel : sel.substring(0, op)).trim();
    java.util.function.Function<Snapshot, Optional<String>> getter = getter(filter, field);
    if (op < 0) {
      return s -> getter.apply(s).isPresent();
    }
    String value = unquote(sel.substring(op + 2).trim());
    switch (operator) {
      case "==":
        return s -> getter.apply(s).map(value::equals).orElse(false);
      case "!=":
        return s -> !getter.apply(s).map(value::equals).orElse(false);
      default:
        try {
          Pattern p = Pattern.compile(value);
          return s -> getter.apply(s).map(v -> p.matcher(v).find()).orElse(false);
        } catch (PatternSyntaxException e) {
          throw SnapshotException.invalidArgument("filter " + filter + ": bad regular expression: " + e.getDescription());
        }
    }
  }

  private static java.util.function.Function<Snapshot, Optional<String>> getter(String filter, String field)
      throws SnapshotException {
    switch (field) {
      case "name":
        return s -> Optional.of(s.name());
      case "parent":
        // containerd asks for parent=="" to mean "no parent" (the unpacker does, to find a remote snapshot).
        return s -> Optional.of(s.parent().orElse(""));
      case "kind":
        return s -> Optional.of(s.kind().name().toLowerCase(java.util.Locale.ROOT));
      default:
        if (field.startsWith("labels.") && field.length() > 7) {
          String key = unquote(field.substring(7));
          return s -> Optional.ofNullable(s.labels().get(key));
        }
        throw SnapshotException.invalidArgument("filter " + filter + ": unknown field '" + field
            + "' (name, parent, kind, labels.KEY)");
    }
  }

  private static String unquote(String v) {
    if (v.length() >= 2 && v.startsWith("\"") && v.endsWith("\"")) {
      return v.substring(1, v.length() - 1).replace("\\\"", "\"");
    }
    return v;
  }

  private static List<String> splitOutsideQuotes(String s) {
    List<String> parts = new ArrayList<>();
    boolean quoted = false;
    int start = 0;
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' && (i == 0 || s.charAt(i - 1) != '\\')) {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        parts.add(s.substring(start, i));
        start = i + 1;
      }
    }
    parts.add(s.substring(start));
    return parts;
  }

  private static int indexOutsideQuotes(String s, String needle) {
    boolean quoted = false;
    for (int i = 0; i + needle.length() <= s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' && (i == 0 || s.charAt(i - 1) != '\\')) {
        quoted = !quoted;
      } else if (!quoted && s.startsWith(needle, i)) {
        return i;
      }
    }
    return -1;
  }
}
