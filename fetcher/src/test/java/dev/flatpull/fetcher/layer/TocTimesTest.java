package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** A TOC's times read in place give what {@link OffsetDateTime#parse} gives, and what it refuses is refused. */
class TocTimesTest {
  @Test
  void theUsualForms_readInPlace_equalTheFullParser() {
    Random r = new Random(42);
    for (int i = 0; i < 20_000; i++) {
      int year = 1 + r.nextInt(9998);
      int month = 1 + r.nextInt(12);
      int day = 1 + r.nextInt(java.time.YearMonth.of(year, month).lengthOfMonth());
      String base = String.format(Locale.ROOT, "%04d-%02d-%02dT%02d:%02d:%02d", year, month, day, r.nextInt(24),
          r.nextInt(60), r.nextInt(60));
      String fraction = switch (r.nextInt(4)) {
        case 0 -> "";
        case 1 -> "." + r.nextInt(10);
        case 2 -> String.format(Locale.ROOT, ".%09d", r.nextInt(1_000_000_000));
        default -> String.format(Locale.ROOT, ".%06d", r.nextInt(1_000_000));
      };
      String zone = switch (r.nextInt(3)) {
        case 0 -> "Z";
        case 1 -> String.format(Locale.ROOT, "+%02d:%02d", r.nextInt(15), r.nextInt(60));
        default -> String.format(Locale.ROOT, "-%02d:%02d", r.nextInt(13), r.nextInt(60));
      };
      String s = base + fraction + zone;
      assertEquals(OffsetDateTime.parse(s).toInstant(), TocParser.rfc3339(s), s);
    }
  }

  @Test
  void whatTheFullParserRefuses_isRefused_andItsOtherFormsStillRead() {
    for (String bad : List.of("2024-02-30T10:00:00Z", "2023-13-01T10:00:00Z", "2024-05-01T24:00:00Z",
        "2024-05-01T10:60:00Z", "2024-05-01T10:00:61Z", "2024-05-01T10:00:00",
        "2024-05-01T10:00:00+25:00", "2024-05-01T10:00:00+0100", "2024-05-01 10:00:00Z", "x024-05-01T10:00:00Z",
        "2024-05-01T10:00:00ZZ", "")) {
      assertThrows(DateTimeParseException.class, () -> TocParser.rfc3339(bad), bad);
    }
    for (String other : List.of("2024-05-01T10:00Z", "+12024-05-01T10:00:00Z", "2024-05-01t10:00:00z",
        "2024-05-01T10:00:00.123456789012Z", "2024-05-01T10:00:00.Z")) {
      try {
        assertEquals(OffsetDateTime.parse(other).toInstant(), TocParser.rfc3339(other), other);
      } catch (DateTimeParseException refusedByBoth) {
        assertThrows(DateTimeParseException.class, () -> OffsetDateTime.parse(other), other);
      }
    }
  }
}
