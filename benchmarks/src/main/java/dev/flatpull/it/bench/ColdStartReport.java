package dev.flatpull.it.bench;

import dev.flatpull.it.LinkEmulator;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * What {@link ColdStartBenchmark} measured, summed up: per image and link, each mode's median time to ready (and its
 * spread, its split into pull, create and start), its speedups, requests and bytes before ready, the snapshotter's
 * memory, and its ratio to the physical limit; the images' sizes; and the smoke check's verdict. Computed from the
 * results alone, so that a table never shows a figure the run did not measure.
 */
final class ColdStartReport {
  /** A runtime-image start counts as having fallen back below this share of bytes from its runtime image. */
  static final double MIN_HIT_RATIO = 0.90;

  /**
   * An image's stored sizes in bytes, by format ({@link ColdStartResult#format()}): its compressed layers, and its
   * runtime image where one was built for that format.
   */
  record ImageSizes(String image, Map<String, Long> compressed, Map<String, Long> runtimeImage) {}

  /** One row of the table: a mode on one format, with its results. */
  private record Row(String mode, String format, List<ColdStartResult> results) {
    List<ColdStartResult> ready() {
      return results.stream().filter(ColdStartResult::reachedReadiness).toList();
    }

    long median(java.util.function.ToLongFunction<ColdStartResult> f) {
      return ColdStartReport.median(ready().stream().map(f::applyAsLong).toList());
    }
  }

  private final List<ColdStartResult> results;
  private final Map<String, ImageSizes> sizes;

  ColdStartReport(List<ColdStartResult> results, Map<String, ImageSizes> sizes) {
    this.results = List.copyOf(results);
    this.sizes = sizes;
  }

  /** The (image, link) groups in the order the run measured them. */
  List<String[]> groups() {
    List<String[]> out = new ArrayList<>();
    for (ColdStartResult r : results) {
      if (out.stream().noneMatch(g -> g[0].equals(r.image()) && g[1].equals(r.link()))) {
        out.add(new String[] {r.image(), r.link()});
      }
    }
    return out;
  }

  private List<Row> rows(String image, String link) {
    Map<String, Row> rows = new LinkedHashMap<>();
    for (ColdStartResult r : results) {
      if (r.image().equals(image) && r.link().equals(link)) {
        rows.computeIfAbsent(r.mode() + "\u0000" + r.format(), k -> new Row(r.mode(), r.format(), new ArrayList<>()))
            .results().add(r);
      }
    }
    return List.copyOf(rows.values());
  }

  /** The row of {@code mode} on {@code format}, else on flatpull's format, else on any. */
  private static Optional<Row> baseline(List<Row> rows, String mode, String format) {
    return rows.stream().filter(r -> r.mode().equals(mode) && r.format().equals(format)).findFirst()
        .or(() -> rows.stream().filter(r -> r.mode().equals(mode) && r.format().equals("flatpull")).findFirst())
        .or(() -> rows.stream().filter(r -> r.mode().equals(mode)).findFirst())
        .filter(r -> !r.ready().isEmpty());
  }

  /**
   * The physical limit of a cold start of {@code image} over {@code link}: the warm start on overlayfs measured in the
   * same run, plus one round trip, plus the runtime image's bytes at the link's bandwidth. Empty when the run did not
   * measure a warm start or build a runtime image.
   */
  OptionalLong limitMillis(String image, String link) {
    Optional<Row> warm = baseline(rows(image, link), "warm-overlayfs", "gzip");
    Long ri = Optional.ofNullable(sizes.get(image)).map(s -> s.runtimeImage().get("flatpull")).orElse(null);
    if (warm.isEmpty() || ri == null) {
      return OptionalLong.empty();
    }
    LinkEmulator.Link l = LinkEmulator.Link.parse(link);
    return OptionalLong.of(warm.get().median(ColdStartResult::readyMillis) + l.rtt().toMillis()
        + Math.round(ri * 8_000.0 / l.bitsPerSecond()));
  }

  /** The Markdown tables: cold starts per image and link, the images' sizes, and the physical limits. */
  String markdown() {
    StringBuilder b = new StringBuilder();
    b.append("| image | link | mode | layers | time to ready, median (min-max) | pull | create | start to ready |"
        + " vs overlayfs | vs lazy | vs stargz | x limit | requests before ready | MB before ready |"
        + " RSS daemon / manager, MiB | peak daemon / manager / group, MiB |\n");
    b.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (String[] g : groups()) {
      List<Row> rows = rows(g[0], g[1]);
      OptionalLong limit = limitMillis(g[0], g[1]);
      for (Row row : rows) {
        List<ColdStartResult> ok = row.ready();
        String failures = ok.size() == row.results().size() ? ""
            : " (" + (row.results().size() - ok.size()) + " of " + row.results().size() + " not ready)";
        if (ok.isEmpty()) {
          b.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | not ready%s | | | | | | | | | | | |%n", g[0], g[1],
              row.mode(), row.format(), failures));
          continue;
        }
        long ready = row.median(ColdStartResult::readyMillis);
        b.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | %s (%s-%s)%s | %s | %s | %s | %s | %s | %s | %s"
                + " | %d | %.1f | %s | %s |%n",
            g[0], g[1], row.mode(), row.format(), seconds(ready),
            plain(ok.stream().mapToLong(ColdStartResult::readyMillis).min().orElse(0)),
            plain(ok.stream().mapToLong(ColdStartResult::readyMillis).max().orElse(0)), failures,
            seconds(row.median(ColdStartResult::pullMillis)), seconds(row.median(ColdStartResult::createMillis)),
            seconds(row.median(ColdStartResult::startMillis)),
            speedup(baseline(rows, "overlayfs", "gzip"), ready),
            speedup(baseline(rows, "lazy", row.format()), ready),
            speedup(baseline(rows, "stargz", row.format()), ready),
            limit.isPresent() ? String.format(Locale.ROOT, "%.2f", ready / (double) limit.getAsLong()) : "-",
            row.median(ColdStartResult::requests), row.median(ColdStartResult::bytesDown) / 1e6,
            rss(row), peaks(row)));
      }
    }
    appendProducers(b);
    b.append("\n| image | layers | compressed image | runtime image | runtime image, % of image |\n|---|---|---|---|---|\n");
    for (ImageSizes s : sizes.values()) {
      s.compressed().forEach((format, bytes) -> {
        Long ri = s.runtimeImage().get(format);
        b.append(String.format(Locale.ROOT, "| %s | %s | %.1f MB | %s | %s |%n", s.image(), format, bytes / 1e6,
            ri == null ? "-" : String.format(Locale.ROOT, "%.2f MB", ri / 1e6),
            ri == null ? "-" : String.format(Locale.ROOT, "%.2f %%", 100.0 * ri / bytes)));
      });
    }
    b.append("\n| image | link | warm start (overlayfs) | round trip | runtime image at link speed | physical limit |"
        + "\n|---|---|---|---|---|---|\n");
    for (String[] g : groups()) {
      OptionalLong limit = limitMillis(g[0], g[1]);
      if (limit.isEmpty()) {
        continue;
      }
      LinkEmulator.Link l = LinkEmulator.Link.parse(g[1]);
      long warm = baseline(rows(g[0], g[1]), "warm-overlayfs", "gzip").orElseThrow()
          .median(ColdStartResult::readyMillis);
      long ri = sizes.get(g[0]).runtimeImage().get("flatpull");
      b.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | %s | %s |%n", g[0], g[1], seconds(warm),
          seconds(l.rtt().toMillis()), seconds(Math.round(ri * 8_000.0 / l.bitsPerSecond())),
          seconds(limit.getAsLong())));
    }
    appendFileSystem(b);
    b.append("\n| image | layers | lazy starts | first mount: TOC | first mount: tree and mount | later mount: TOC |"
        + " later mount: tree and mount | first / later, TOC's arrival to mounted tree |\n|---|---|---|---|---|---|---|---|\n");
    Map<String, List<ColdStartResult>> lazy = new LinkedHashMap<>();
    results.stream().filter(r -> r.reachedReadiness() && r.firstMount().size() == 3 && r.laterMount().size() == 3)
        .forEach(r -> lazy.computeIfAbsent(r.image() + "\u0000" + r.format(), k -> new ArrayList<>()).add(r));
    lazy.forEach((key, rs) -> {
      long firstToc = median(rs.stream().map(r -> r.firstMount().get(0)).toList());
      long firstTree = median(rs.stream().map(r -> r.firstMount().get(1) + r.firstMount().get(2)).toList());
      long laterToc = median(rs.stream().map(r -> r.laterMount().get(0)).toList());
      long laterTree = median(rs.stream().map(r -> r.laterMount().get(1) + r.laterMount().get(2)).toList());
      String[] k = key.split("\u0000");
      b.append(String.format(Locale.ROOT, "| %s | %s | %d | %d ms | %d ms | %d ms | %d ms | %s |%n", k[0], k[1],
          rs.size(), firstToc, firstTree, laterToc, laterTree,
          laterTree == 0 ? "-" : String.format(Locale.ROOT, "%.2f", firstTree / (double) laterTree)));
    });
    return b.toString();
  }

  /**
   * Lazy starts on zstd:chunked as containers/storage's compressor writes it (skopeo) against flatpull's own
   * conversion of the same image, when both ran: the ratio of their median times to ready, and the layers either
   * pulled whole.
   */
  private void appendProducers(StringBuilder b) {
    boolean header = false;
    for (String[] g : groups()) {
      List<Row> rows = rows(g[0], g[1]);
      Optional<Row> skopeo = rows.stream().filter(r -> r.mode().equals("lazy") && r.format().equals("skopeo-zstd")
          && !r.ready().isEmpty()).findFirst();
      Optional<Row> own = rows.stream().filter(r -> r.mode().equals("lazy") && r.format().equals("flatpull-zstd")
          && !r.ready().isEmpty()).findFirst();
      if (skopeo.isEmpty() || own.isEmpty()) {
        continue;
      }
      if (!header) {
        b.append("\n| image | link | lazy on skopeo's zstd:chunked | lazy on flatpull's zstd:chunked | ratio |"
            + " layers pulled whole (skopeo's) |\n|---|---|---|---|---|---|\n");
        header = true;
      }
      long s = skopeo.get().median(ColdStartResult::readyMillis);
      long f = own.get().median(ColdStartResult::readyMillis);
      b.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | %.2fx | %d |%n", g[0], g[1], seconds(s), seconds(f),
          s / (double) f, skopeo.get().ready().stream().mapToLong(ColdStartResult::fallbacks).max().orElse(0)));
    }
  }

  /**
   * What makes the smoke run fail: a start that did not reach readiness, and a runtime-image start that fell back
   * (a rejected or missing runtime image, or a hit ratio below {@link #MIN_HIT_RATIO}). Empty when all is well.
   */
  List<String> problems() {
    List<String> out = new ArrayList<>();
    for (ColdStartResult r : results) {
      String what = String.format("run %d, %s, %s, %s on %s", r.run(), r.image(), r.link(), r.mode(), r.format());
      if (r.peaks().oomKills() > 0) {
        out.add(what + ": " + r.peaks().oomKills() + " processes killed at the memory limit of "
            + (r.peaks().groupLimit() >> 20) + " MiB");
      }
      if (!r.reachedReadiness()) {
        out.add(what + ": not ready: " + r.error());
      } else if (r.mode().startsWith("lazy") && r.fallbacks() > 0) {
        out.add(what + ": " + r.fallbacks() + " layers pulled whole instead of lazily");
      } else if (r.mode().startsWith("runtime-image")) {
        if (r.fallbacks() != 0) {
          out.add(what + ": fell back to lazy loading (" + r.fallbacks() + " rejected or not found)");
        } else if (r.hitRatio() < MIN_HIT_RATIO) {
          out.add(String.format(Locale.ROOT, "%s: runtime-image hit ratio %.3f, below %.2f", what, r.hitRatio(),
              MIN_HIT_RATIO));
        }
      }
    }
    return out;
  }

  /** Each row's median, min and max time to ready, for the chart. */
  List<ColdStartChart.Bar> bars(String image, String link) {
    return rows(image, link).stream().filter(r -> !r.ready().isEmpty()).map(r -> new ColdStartChart.Bar(
        r.mode() + " (" + r.format() + ")", r.median(ColdStartResult::readyMillis),
        r.ready().stream().mapToLong(ColdStartResult::readyMillis).min().orElse(0),
        r.ready().stream().mapToLong(ColdStartResult::readyMillis).max().orElse(0))).toList();
  }

  /** Median peaks of the daemon, the manager and their memory group (VmHWM, memory.peak), with any OOM kill. */
  /**
   * What the file system adds to a start whose data is on the node: the second start on flatpull against overlayfs'
   * (time to ready), and a runtime-image start's start-to-ready against overlayfs' warm start-to-ready with the part
   * of the stream still under way when the task started added ({@link ColdStartResult#streamLeftMillis}): the bound
   * is 1.2x the one plus the other.
   */
  private void appendFileSystem(StringBuilder b) {
    StringBuilder t = new StringBuilder();
    for (String[] g : groups()) {
      List<Row> rows = rows(g[0], g[1]);
      Optional<Row> warm = baseline(rows, "warm-overlayfs", "gzip");
      if (warm.isEmpty()) {
        continue;
      }
      Optional<Row> flatpull = rows.stream().filter(r -> r.mode().equals("warm-flatpull") && !r.ready().isEmpty())
          .findFirst();
      Optional<Row> ri = rows.stream().filter(r -> r.mode().equals("runtime-image") && !r.ready().isEmpty())
          .findFirst();
      long warmReady = warm.get().median(ColdStartResult::readyMillis);
      long warmStart = warm.get().median(ColdStartResult::startMillis);
      String riStart = "-";
      String left = "-";
      String bound = "-";
      String ratio = "-";
      if (ri.isPresent()) {
        List<Long> lefts = ri.get().ready().stream().map(ColdStartResult::streamLeftMillis).filter(x -> x >= 0)
            .toList();
        long start = ri.get().median(ColdStartResult::startMillis);
        riStart = seconds(start);
        if (!lefts.isEmpty()) {
          long l = median(lefts);
          long limit = Math.round(1.2 * warmStart) + l;
          left = seconds(l);
          bound = seconds(limit);
          ratio = String.format(Locale.ROOT, "%.2f", start / (double) Math.max(1, limit));
        }
      }
      t.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | %s | %s | %s | %s |%n", g[0], g[1],
          flatpull.map(f -> String.format(Locale.ROOT, "%.2fx", f.median(ColdStartResult::readyMillis)
              / (double) Math.max(1, warmReady))).orElse("-"), seconds(warmStart), riStart, left, bound, ratio));
    }
    if (t.length() > 0) {
      b.append("\n| image | link | warm-flatpull / warm-overlayfs | warm-overlayfs: start to ready |"
          + " runtime image: start to ready | its stream left at start | 1.2x warm + stream left | runtime image /"
          + " that |\n|---|---|---|---|---|---|---|---|\n").append(t);
    }
  }

  private static String peaks(Row row) {
    long d = row.median(r -> r.peaks().daemon());
    long m = row.median(r -> r.peaks().manager());
    long g = row.median(r -> r.peaks().group());
    if (d < 0 && m < 0 && g < 0) {
      return "-";
    }
    long killed = row.results().stream().mapToLong(r -> Math.max(0, r.peaks().oomKills())).sum();
    return mib(d) + " / " + mib(m) + " / " + mib(g) + (killed > 0 ? " (" + killed + " OOM kills)" : "");
  }

  private static String mib(long bytes) {
    return bytes < 0 ? "-" : Long.toString(bytes >> 20);
  }

  private static String rss(Row row) {
    long d = row.median(ColdStartResult::daemonRss);
    long m = row.median(ColdStartResult::managerRss);
    if (d < 0 && m < 0) {
      return "-";
    }
    return (d < 0 ? "-" : Long.toString(d >> 20)) + " / " + (m < 0 ? "-" : Long.toString(m >> 20));
  }

  private static String speedup(Optional<Row> baseline, long millis) {
    return baseline.map(r -> r.median(ColdStartResult::readyMillis))
        .filter(b -> b > 0 && millis > 0).map(b -> String.format(Locale.ROOT, "%.2fx", b / (double) millis))
        .orElse("-");
  }

  static String seconds(long millis) {
    return String.format(Locale.ROOT, "%.2f s", millis / 1000.0);
  }

  private static String plain(long millis) {
    return String.format(Locale.ROOT, "%.2f", millis / 1000.0);
  }

  static long median(List<Long> values) {
    if (values.isEmpty()) {
      return -1;
    }
    List<Long> sorted = new ArrayList<>(values);
    sorted.sort(null);
    return sorted.get(sorted.size() / 2);
  }
}
