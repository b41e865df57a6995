package dev.flatpull.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class DigestTest {
  @Test
  void sha256_ofEmpty_isTheWellKnownValue() {
    assertEquals("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Digest.sha256(new byte[0]).toString());
  }

  @Test
  void parse_rejectsMalformedAndUnknownAlgorithms() {
    assertThrows(IllegalArgumentException.class, () -> Digest.parse("sha256:ABC"));
    assertThrows(IllegalArgumentException.class, () -> Digest.parse("md5:" + "0".repeat(32)));
    assertThrows(IllegalArgumentException.class, () -> Digest.parse("nocolon"));
  }

  @Test
  void verify_mismatch_carriesBothDigests() {
    byte[] b = "abc".getBytes(StandardCharsets.US_ASCII);
    Digest right = Digest.sha256(b);
    b[0] = 'x';
    DigestMismatchException e = assertThrows(DigestMismatchException.class, () -> right.verify("chunk 0", b, 0, 3));
    assertEquals(right, e.expected());
    assertEquals(Digest.sha256(b), e.actual());
  }

  @Test
  void boundedInputStream_stopsPastTheLimit() {
    var in = new BoundedInputStream(new java.io.ByteArrayInputStream(new byte[100]), "bomb", 10);
    assertThrows(SizeLimitExceededException.class, in::readAllBytes);
  }

  @Test
  void byteRange_rejectsNegativeAndFormatsHttpRanges() {
    assertThrows(IllegalArgumentException.class, () -> new ByteRange(-1, 3));
    assertEquals("bytes=10-19", new ByteRange(10, 10).httpRangeHeader());
  }

  @Test
  void digestText_isExactlyTheAlgorithmsLengthOfLowerCaseHex_throughEitherDoor() {
    String hex = Digest.sha256(new byte[] {1}).hex();
    Digest parsed = Digest.parse("sha256:" + hex);
    Digest built = new Digest("sha256", hex);
    assertEquals(parsed, built);
    assertEquals(parsed.hashCode(), built.hashCode(), "the in-place parse hashes as the constructor does");
    assertEquals(Digest.sha256(new byte[] {1}), built);
    assertNotEquals(built.hashCode(), Digest.sha256(new byte[] {2}).hashCode());
    String sha512 = "0123456789abcdef".repeat(8);
    assertEquals(sha512, Digest.parse("sha512:" + sha512).hex());
    assertEquals("sha512", Digest.parse("sha512:" + sha512).algorithm());
    for (String bad : new String[] {hex.toUpperCase(java.util.Locale.ROOT), hex.substring(2), hex + "00",
        hex.substring(1) + "g"}) {
      assertThrows(IllegalArgumentException.class, () -> Digest.parse("sha256:" + bad), bad);
      assertThrows(IllegalArgumentException.class, () -> new Digest("sha256", bad), bad);
    }
    String m = assertThrows(IllegalArgumentException.class, () -> Digest.parse(":" + hex)).getMessage();
    assertTrue(m.contains("expected algorithm:hex"), m);
  }

  @Test
  void boundedInputStream_passesExactlyItsLimit() throws Exception {
    byte[] ten = "0123456789".getBytes(StandardCharsets.US_ASCII);
    var in = new BoundedInputStream(new java.io.ByteArrayInputStream(ten), "exact", 10);
    assertArrayEquals(ten, in.readAllBytes());
    assertEquals(10, in.count());
    var one = new BoundedInputStream(new java.io.ByteArrayInputStream("0123456789!".getBytes(StandardCharsets.US_ASCII)),
        "one more", 10);
    for (int i = 0; i < 10; i++) {
      assertEquals('0' + i, one.read());
    }
    assertThrows(SizeLimitExceededException.class, one::read);
  }

  @Test
  void byteRange_acceptsItsBoundaries() {
    assertEquals(3, new ByteRange(0, 3).end());
    assertFalse(new ByteRange(0, 3).isEmpty());
    assertTrue(new ByteRange(5, 0).isEmpty());
    assertEquals(Long.MAX_VALUE, new ByteRange(Long.MAX_VALUE - 3, 3).end());
    assertThrows(IllegalArgumentException.class, () -> new ByteRange(Long.MAX_VALUE - 2, 3));
    assertThrows(IllegalArgumentException.class, () -> new ByteRange(0, -1));
  }
}
