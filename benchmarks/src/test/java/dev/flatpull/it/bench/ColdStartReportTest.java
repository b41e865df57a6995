package dev.flatpull.it.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class ColdStartReportTest {
  private static ColdStartResult ready(int run, String mode, String format, long millis) {
    return new ColdStartResult(run, "python", "20ms/200mbit", mode, format, millis / 4, millis / 4, millis / 2,
        millis, 10, 1_000_000, 1, Map.of(), 100 << 20, 200 << 20,
        new ColdStartResult.Peaks(110 << 20, 250 << 20, 400 << 20, 1536L << 20, 0), mode.startsWith("runtime-image") ? 1.0 : -1,
        mode.startsWith("runtime-image") ? 0 : -1, mode.equals("lazy") ? List.of(100L, 20L, 30L) : List.of(),
        mode.equals("lazy") ? List.of(90L, 20L, 20L + run) : List.of(), mode.startsWith("runtime-image") ? 100 : -1, "");
  }

  private static final Map<String, ColdStartReport.ImageSizes> SIZES = Map.of("python",
      new ColdStartReport.ImageSizes("python", Map.of("gzip", 100_000_000L, "flatpull", 120_000_000L),
          Map.of("flatpull", 5_000_000L)));

  private static List<ColdStartResult> matrix() {
    List<ColdStartResult> rs = new ArrayList<>();
    for (int run = 1; run <= 3; run++) {
      rs.add(ready(run, "overlayfs", "gzip", 8000 + run));
      rs.add(ready(run, "lazy", "flatpull", 4000 + 100 * run));
      rs.add(ready(run, "runtime-image", "flatpull", 2000 * run));
      rs.add(ready(run, "stargz", "flatpull", 3000));
      rs.add(ready(run, "warm-overlayfs", "gzip", 500));
    }
    return rs;
  }

  @Test
  void fileSystemTable_givesTheWarmRatio_andTheRuntimeImagesStartAgainstTheWarmStartPlusTheStreamLeft() {
    List<ColdStartResult> rs = new ArrayList<>(matrix());
    for (int run = 1; run <= 3; run++) {
      rs.add(ready(run, "warm-flatpull", "flatpull", 550));
    }
    String md = new ColdStartReport(rs, SIZES).markdown();
    // 550 / 500; warm start to ready 250 ms; runtime image's 2000 ms against 1.2 x 250 + 100 = 400 ms
    assertTrue(md.contains("| python | 20ms/200mbit | 1.10x | 0.25 s | 2.00 s | 0.10 s | 0.40 s | 5.00 |"), md);
  }

  @Test
  void limit_isTheWarmStartPlusARoundTripPlusTheRuntimeImageAtLinkSpeed() {
    ColdStartReport r = new ColdStartReport(matrix(), SIZES);
    // 500 ms warm + 20 ms + 5 MB at 200 Mbit/s (200 ms)
    assertEquals(720, r.limitMillis("python", "20ms/200mbit").getAsLong());
    assertTrue(new ColdStartReport(matrix().stream().filter(x -> !x.mode().equals("warm-overlayfs")).toList(), SIZES)
        .limitMillis("python", "20ms/200mbit").isEmpty(), "no limit without a warm start measured");
  }

  @Test
  void table_showsMediansSpreadSpeedupsAndTheRatioToTheLimit() {
    String md = new ColdStartReport(matrix(), SIZES).markdown();
    // runtime-image: 2000, 4000, 6000 -> median 4000; lazy median 4200; overlayfs 8002; stargz 3000.
    String row = md.lines().filter(l -> l.contains("| runtime-image |")).findFirst().orElseThrow();
    assertTrue(row.contains("| 4.00 s (2.00-6.00) |"), row);
    assertTrue(row.contains("| 2.00x | 1.05x | 0.75x | 5.56 |"), row);
    assertTrue(row.contains("| 100 / 200 |"), row);
    assertTrue(md.contains("| python | flatpull | 120.0 MB | 5.00 MB | 4.17 % |"), md);
    assertTrue(md.contains("| python | 20ms/200mbit | 0.50 s | 0.02 s | 0.20 s | 0.72 s |"), md);
    // first: 100 + 50 ms; later: 90 + 20 + 22 (the median of 21, 22, 23)
    assertTrue(md.contains("| python | flatpull | 3 | 100 ms | 50 ms | 90 ms | 42 ms | 1.19 |"), md);
  }

  @Test
  void problems_nameStartsThatWereNotReady_andRuntimeImageStartsThatFellBack() {
    List<ColdStartResult> rs = new ArrayList<>(matrix());
    assertEquals(List.of(), new ColdStartReport(rs, SIZES).problems());
    rs.add(ColdStartResult.failed(4, "python", "20ms/200mbit", "stargz", "flatpull", "no HTTP 200"));
    rs.add(new ColdStartResult(4, "python", "20ms/200mbit", "runtime-image", "flatpull", 1, 1, 1, 3, 1, 1, 1,
        Map.of(), 1, 1, ColdStartResult.Peaks.NONE, 1.0, 2, List.of(), List.of(), -1, ""));
    rs.add(new ColdStartResult(5, "python", "20ms/200mbit", "runtime-image", "flatpull", 1, 1, 1, 3, 1, 1, 1,
        Map.of(), 1, 1, ColdStartResult.Peaks.NONE, 0.8, 0, List.of(), List.of(), -1, ""));
    List<String> p = new ColdStartReport(rs, SIZES).problems();
    assertEquals(3, p.size(), p.toString());
    assertTrue(p.get(0).contains("not ready: no HTTP 200"), p.get(0));
    assertTrue(p.get(1).contains("fell back"), p.get(1));
    assertTrue(p.get(2).contains("hit ratio 0.800"), p.get(2));
    String md = new ColdStartReport(rs, SIZES).markdown();
    assertTrue(md.contains("(1 of 4 not ready)"), md);
  }

  @Test
  void chart_hasABarPerModeAndTheLimitLine() {
    String svg = ColdStartChart.svg(new ColdStartReport(matrix(), SIZES));
    assertTrue(svg.startsWith("<svg"), svg);
    assertEquals(5, svg.split("<rect x=").length - 1, svg);
    assertTrue(svg.contains("physical limit 0.72 s"), svg);
    assertTrue(svg.contains(">runtime-image (flatpull)</text>"), svg);
  }
}
