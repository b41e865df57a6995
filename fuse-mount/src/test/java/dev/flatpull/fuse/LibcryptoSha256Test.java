package dev.flatpull.fuse;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Digest;
import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.util.Random;
import org.junit.jupiter.api.Test;

class LibcryptoSha256Test {
  @Test
  void libcrypto_givesTheJdksDigests_andOnceInstalled_isWhatDigestUses() throws Exception {
    assertTrue(LibcryptoSha256.agreesWithTheJdk(LibcryptoSha256.bound()));
    assertTrue(LibcryptoSha256.install());
    assertTrue(LibcryptoSha256.install(), "a second install is a no-op");
    MessageDigest md = MessageDigest.getInstance("SHA-256");
    assertEquals("flatpull-libcrypto", md.getProvider().getName());
    Random random = new Random(7);
    for (int length : new int[] {0, 3, 64, 4095, 16_384, 1 << 20}) {
      byte[] b = new byte[length + 10];
      random.nextBytes(b);
      MessageDigest jdk = MessageDigest.getInstance("SHA-256", "SUN");
      jdk.update(b, 5, length);
      byte[] expected = jdk.digest();
      assertEquals(new Digest("sha256", java.util.HexFormat.of().formatHex(expected)), Digest.sha256(b, 5, length));
      MessageDigest ours = MessageDigest.getInstance("SHA-256");
      ours.update(ByteBuffer.wrap(b, 5, length));
      assertArrayEquals(expected, ours.digest(), "from a buffer's position, " + length + " bytes");
      ours.update(ByteBuffer.allocateDirect(length).put(b, 5, length).flip());
      assertArrayEquals(expected, ours.digest(), "from a direct buffer, after a digest reset it");
    }
    MessageDigest partial = MessageDigest.getInstance("SHA-256");
    partial.update("ab".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
    MessageDigest copy = (MessageDigest) partial.clone();
    partial.update((byte) 'c');
    copy.update((byte) 'c');
    byte[] abc = java.util.HexFormat.of().parseHex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assertArrayEquals(abc, partial.digest(), "FIPS 180-2's 'abc'");
    assertArrayEquals(abc, copy.digest(), "and its clone's");
  }

  @Test
  void aLibcryptoThatDisagrees_isNotInstalled() {
    LibcryptoSha256.Crypto real = LibcryptoSha256.bound();
    LibcryptoSha256.Crypto wrong = new LibcryptoSha256.Crypto() {
      @Override
      public int SHA256_Init(byte[] ctx) {
        return real.SHA256_Init(ctx);
      }

      @Override
      public int SHA256_Update(byte[] ctx, ByteBuffer data, long length) {
        // Drops the last byte of every update of more than one.
        return real.SHA256_Update(ctx, data, Math.max(length - 1, Math.min(length, 1)));
      }

      @Override
      public int SHA256_Final(byte[] digest, byte[] ctx) {
        return real.SHA256_Final(digest, ctx);
      }
    };
    assertFalse(LibcryptoSha256.agreesWithTheJdk(wrong));
  }
}
