package dev.flatpull.it.bench;

import java.util.List;
import java.util.Locale;
import java.util.OptionalLong;

/**
 * The cold-start results as an SVG chart: one panel per image and link, a horizontal bar per mode (median time to
 * ready, with a whisker from the fastest to the slowest repetition) and a dashed line at the physical limit. Plain
 * SVG, so that it renders in a browser and on GitHub without a plotting library.
 */
final class ColdStartChart {
  /** One bar: its label and times in milliseconds. */
  record Bar(String label, long median, long min, long max) {}

  private static final int WIDTH = 960;
  private static final int LABEL = 260;
  private static final int ROW = 22;
  private static final int HEADER = 34;
  private static final int GAP = 24;

  private ColdStartChart() {}

  static String svg(ColdStartReport report) {
    StringBuilder body = new StringBuilder();
    int y = 10;
    for (String[] g : report.groups()) {
      List<Bar> bars = report.bars(g[0], g[1]);
      if (bars.isEmpty()) {
        continue;
      }
      OptionalLong limit = report.limitMillis(g[0], g[1]);
      long top = Math.max(bars.stream().mapToLong(Bar::max).max().orElse(1), limit.orElse(0));
      double scale = (WIDTH - LABEL - 70) / (double) top;
      body.append(String.format(Locale.ROOT,
          "<text x=\"10\" y=\"%d\" font-weight=\"bold\">%s over %s: time to ready (median, min-max)</text>%n",
          y + 18, escape(g[0]), escape(g[1])));
      int rowsTop = y + HEADER;
      for (int i = 0; i < bars.size(); i++) {
        Bar b = bars.get(i);
        int ry = rowsTop + i * ROW;
        String colour = b.label().startsWith("runtime-image") ? "#2b8a3e"
            : b.label().startsWith("stargz") ? "#e67700"
            : b.label().contains("overlayfs") ? "#868e96" : "#1c7ed6";
        body.append(String.format(Locale.ROOT,
            "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>%n"
                + "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>%n"
                + "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>%n"
                + "<text x=\"%.1f\" y=\"%d\">%.2f s</text>%n",
            LABEL - 6, ry + 15, escape(b.label()), LABEL, ry + 3, b.median() * scale, ROW - 6, colour,
            LABEL + b.min() * scale, ry + ROW / 2, LABEL + b.max() * scale, ry + ROW / 2,
            LABEL + b.max() * scale + 4, ry + 15, b.median() / 1000.0));
      }
      int rowsBottom = rowsTop + bars.size() * ROW;
      if (limit.isPresent()) {
        double x = LABEL + limit.getAsLong() * scale;
        body.append(String.format(Locale.ROOT,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c92a2a\" stroke-dasharray=\"4 3\"/>%n"
                + "<text x=\"%.1f\" y=\"%d\" fill=\"#c92a2a\" font-size=\"11\">physical limit %.2f s</text>%n",
            x, rowsTop - 4, x, rowsBottom, x + 3, rowsTop - 6, limit.getAsLong() / 1000.0));
      }
      y = rowsBottom + GAP;
    }
    return String.format(Locale.ROOT,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\""
            + " font-size=\"13\">%n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>%n%s</svg>%n",
        WIDTH, y, body);
  }

  private static String escape(String s) {
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;");
  }
}
