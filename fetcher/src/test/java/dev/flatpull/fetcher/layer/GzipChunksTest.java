package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Random;
import java.util.zip.CRC32;
import java.util.zip.Deflater;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;
import org.junit.jupiter.api.Test;

class GzipChunksTest {
  private static final Random RANDOM = new Random(7);

  @Test
  void aMemberDecompressesAsGzipInputStreamReadsIt() throws IOException {
    byte[] content = content(100_000);
    byte[] gz = gzip(content);
    byte[] framed = frame(gz, 13, 29);
    assertArrayEquals(content, GzipChunks.inflate(framed, 13, gz.length, 0, content.length));
    assertArrayEquals(viaStream(gz, 777, 5000), GzipChunks.inflate(framed, 13, gz.length, 777, 5000));
  }

  @Test
  void skipsAndReadsAcrossConcatenatedMembers() throws IOException {
    byte[] a = content(30_000);
    byte[] b = content(50_000);
    byte[] c = content(10);
    ByteArrayOutputStream all = new ByteArrayOutputStream();
    all.writeBytes(gzip(a));
    all.writeBytes(gzip(b));
    all.writeBytes(gzip(c));
    byte[] gz = all.toByteArray();
    // Starting in the first member, ending in the third.
    assertArrayEquals(viaStream(gz, 29_000, 51_005), GzipChunks.inflate(gz, 0, gz.length, 29_000, 51_005));
    // Skipping a whole member.
    assertArrayEquals(viaStream(gz, 30_000 + 50_000, 10), GzipChunks.inflate(gz, 0, gz.length, 80_000, 10));
  }

  @Test
  void readsHeadersWithEveryOptionalField() throws IOException {
    byte[] content = "a file's chunk\n".repeat(400).getBytes(StandardCharsets.UTF_8);
    ByteArrayOutputStream member = new ByteArrayOutputStream();
    member.writeBytes(new byte[] {0x1f, (byte) 0x8b, 8, 2 | 4 | 8 | 16, 0, 0, 0, 0, 0, 3});
    member.writeBytes(new byte[] {5, 0, 'x', 'y', 2, 0, 'z'});
    member.writeBytes("name\0".getBytes(StandardCharsets.US_ASCII));
    member.writeBytes("comment\0".getBytes(StandardCharsets.US_ASCII));
    CRC32 headerCrc = new CRC32();
    headerCrc.update(member.toByteArray());
    member.writeBytes(Arrays.copyOf(le32(headerCrc.getValue()), 2));
    member.writeBytes(rawDeflate(content));
    CRC32 crc = new CRC32();
    crc.update(content);
    member.writeBytes(le32(crc.getValue()));
    member.writeBytes(le32(content.length));
    byte[] gz = member.toByteArray();
    assertArrayEquals(viaStream(gz, 0, content.length), GzipChunks.inflate(gz, 0, gz.length, 0, content.length));
  }

  @Test
  void bytesBeyondTheNeededOnesAreNotRead() throws IOException {
    byte[] content = content(20_000);
    byte[] gz = gzip(content);
    byte[] withGarbage = Arrays.copyOf(gz, gz.length + 100);
    Arrays.fill(withGarbage, gz.length, withGarbage.length, (byte) 0x55);
    assertArrayEquals(content, GzipChunks.inflate(withGarbage, 0, withGarbage.length, 0, content.length));
  }

  @Test
  void refusesWhatIsNotWholeGzip() throws IOException {
    byte[] content = content(40_000);
    byte[] gz = gzip(content);
    IOException truncated = assertThrows(IOException.class,
        () -> GzipChunks.inflate(gz, 0, gz.length / 2, 0, content.length));
    assertTrue(truncated.getMessage().contains("truncated"), truncated.getMessage());
    IOException tooShort = assertThrows(IOException.class,
        () -> GzipChunks.inflate(gz, 0, gz.length, 0, content.length + 1));
    assertTrue(tooShort.getMessage().contains("ends after"), tooShort.getMessage());
    byte[] plain = content(100);
    assertThrows(IOException.class, () -> GzipChunks.inflate(plain, 0, plain.length, 0, 10));
    byte[] corrupt = gz.clone();
    for (int i = 20; i < 60; i++) {
      corrupt[i] = (byte) 0xff;
    }
    assertThrows(IOException.class, () -> GzipChunks.inflate(corrupt, 0, corrupt.length, 0, content.length));
    byte[] method = gz.clone();
    method[2] = 7;
    assertThrows(IOException.class, () -> GzipChunks.inflate(method, 0, method.length, 0, content.length));
  }

  @Test
  void theThreadsInflaterIsReusableAfterAFailure() throws IOException {
    byte[] content = content(40_000);
    byte[] gz = gzip(content);
    assertThrows(IOException.class, () -> GzipChunks.inflate(gz, 0, gz.length / 3, 0, content.length));
    assertArrayEquals(content, GzipChunks.inflate(gz, 0, gz.length, 0, content.length));
  }

  private static byte[] content(int n) {
    byte[] b = new byte[n];
    for (int i = 0; i < n; i++) {
      // Compressible but not trivially.
      b[i] = (byte) (RANDOM.nextInt(8) + 'a' + (i % 512 == 0 ? 1 : 0));
    }
    return b;
  }

  private static byte[] gzip(byte[] content) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (GZIPOutputStream gz = new GZIPOutputStream(out)) {
      gz.write(content);
    }
    return out.toByteArray();
  }

  private static byte[] rawDeflate(byte[] content) {
    Deflater d = new Deflater(Deflater.DEFAULT_COMPRESSION, true);
    d.setInput(content);
    d.finish();
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    byte[] buf = new byte[4096];
    while (!d.finished()) {
      out.write(buf, 0, d.deflate(buf));
    }
    d.end();
    return out.toByteArray();
  }

  private static byte[] le32(long v) {
    return new byte[] {(byte) v, (byte) (v >> 8), (byte) (v >> 16), (byte) (v >> 24)};
  }

  private static byte[] frame(byte[] b, int before, int after) {
    byte[] out = new byte[before + b.length + after];
    Arrays.fill(out, (byte) 0x1f);
    System.arraycopy(b, 0, out, before, b.length);
    return out;
  }

  private static byte[] viaStream(byte[] gz, long skip, int size) throws IOException {
    try (GZIPInputStream in = new GZIPInputStream(new ByteArrayInputStream(gz))) {
      in.skipNBytes(skip);
      return in.readNBytes(size);
    }
  }
}
