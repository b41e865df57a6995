package dev.flatpull.fetcher.tar;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.time.Instant;
import java.util.Map;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveInputStream;
import org.junit.jupiter.api.Test;

class TarRoundTripTest {
  private static final byte[] CAPABILITY = {1, 0, 0, 2, (byte) 0x80, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

  @Test
  void writeThenRead_keepsLongNamesIdsAndBinaryXattrs() throws IOException {
    String longName = "opt/" + "x".repeat(150) + "/ü-file";
    TarHeader h = new TarHeader(longName, TarHeader.REG, 5, 04755, 3_000_000, 7, "a-very-long-user-name-over-32-bytes-long", "g",
        Instant.ofEpochSecond(1_700_000_000), "", 0, 0, Map.of("security.capability", CAPABILITY, "user.k", new byte[] {'v'}));
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    TarWriter.writeHeader(out, h);
    out.write("hello".getBytes());
    TarWriter.pad(out, 5);
    TarWriter.writeHeader(out, new TarHeader("dev/sda", TarHeader.BLOCK, 0, 0660, 0, 6, "", "", Instant.EPOCH, "", 8, 0, Map.of()));
    TarWriter.writeEnd(out);

    TarReader r = new TarReader(new ByteArrayInputStream(out.toByteArray()));
    TarHeader back = r.next();
    assertEquals(longName, back.name());
    assertEquals(3_000_000, back.uid());
    assertEquals(04755, back.mode());
    assertEquals("a-very-long-user-name-over-32-bytes-long", back.userName());
    assertArrayEquals(CAPABILITY, back.xattrs().get("security.capability"));
    assertArrayEquals("hello".getBytes(), r.data().readAllBytes());
    TarHeader dev = r.next();
    assertEquals(TarHeader.BLOCK, dev.type());
    assertEquals(8, dev.devMajor());
    assertNull(r.next());

    // An independent reader agrees.
    try (TarArchiveInputStream t = new TarArchiveInputStream(new ByteArrayInputStream(out.toByteArray()))) {
      TarArchiveEntry e = t.getNextEntry();
      assertEquals(longName, e.getName());
      assertEquals(3_000_000, e.getLongUserId());
      assertArrayEquals("hello".getBytes(), t.readAllBytes());
      assertEquals(true, t.getNextEntry().isBlockDevice());
    }
  }

  @Test
  void read_corruptChecksum_isRefused() throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    TarWriter.writeHeader(out, TarHeader.regular("a", 0, 0644, Instant.EPOCH));
    byte[] b = out.toByteArray();
    b[0] = 'b';
    assertThrows(TarReader.TarFormatException.class, () -> new TarReader(new ByteArrayInputStream(b)).next());
  }

  @Test
  void read_truncatedData_isRefused() throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    TarWriter.writeHeader(out, TarHeader.regular("a", 1000, 0644, Instant.EPOCH));
    out.write(new byte[10]);
    TarReader r = new TarReader(new ByteArrayInputStream(out.toByteArray()));
    r.next();
    assertThrows(TarReader.TarFormatException.class, () -> r.data().readAllBytes());
  }
}
