package dev.flatpull.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

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
}
