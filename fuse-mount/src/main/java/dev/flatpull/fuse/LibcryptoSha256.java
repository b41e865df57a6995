package dev.flatpull.fuse;

import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.MessageDigestSpi;
import java.security.NoSuchAlgorithmException;
import java.security.NoSuchProviderException;
import java.security.Provider;
import java.security.Security;
import java.util.Arrays;
import java.util.List;
import jnr.ffi.LibraryLoader;
import jnr.ffi.annotations.In;
import jnr.ffi.annotations.Out;
import jnr.ffi.annotations.Pinned;
import jnr.ffi.types.size_t;

/**
 * SHA-256 from the system's libcrypto, as the FUSE manager's first {@code MessageDigest} provider. The JDK's own runs
 * at the CPU's speed (1,750 MB/s with its SHA extensions on the build machines) only in code its optimizing compiler
 * (C2) made, which replaces the SHA loop with an intrinsic; until C2 has compiled it, and always in a JVM without C2,
 * it runs at 150 MB/s. A manager's first start on a node verifies its first TOCs and runtime image in that window.
 * libcrypto's assembly uses the SHA extensions from the first call: 1,760 MB/s through jnr-ffi on 16 KiB arrays in
 * both cases (docs/benchmarks.md). Its result is checked against the JDK's before it is installed.
 */
public final class LibcryptoSha256 extends MessageDigestSpi implements Cloneable {
  /** libcrypto's low-level SHA-256. Public only because jnr-ffi's generated class, in a loader of its own, implements it. */
  public interface Crypto {
    int SHA256_Init(@Out @Pinned byte[] ctx);

    int SHA256_Update(@In @Out @Pinned byte[] ctx, @In @Pinned ByteBuffer data, @size_t long length);

    int SHA256_Final(@Out @Pinned byte[] digest, @In @Out @Pinned byte[] ctx);
  }

  /** {@code sizeof(SHA256_CTX)}: eight state words, two length words, a 64-byte block, two counters (112 bytes). */
  private static final int CONTEXT_BYTES = 112;
  private static final String NAME = "flatpull-libcrypto";

  private final Crypto crypto;
  // The context lives in a Java array, pinned for each call: nothing native to free, and a clone is a copy.
  private byte[] ctx = new byte[CONTEXT_BYTES];

  private LibcryptoSha256(Crypto crypto) {
    this.crypto = crypto;
    crypto.SHA256_Init(ctx);
  }

  @Override
  protected int engineGetDigestLength() {
    return 32;
  }

  @Override
  protected void engineUpdate(byte input) {
    engineUpdate(new byte[] {input}, 0, 1);
  }

  @Override
  protected void engineUpdate(byte[] input, int offset, int length) {
    if (length > 0) {
      crypto.SHA256_Update(ctx, ByteBuffer.wrap(input, offset, length), length);
    }
  }

  @Override
  protected void engineUpdate(ByteBuffer input) {
    if (input.hasArray()) {
      int n = input.remaining();
      engineUpdate(input.array(), input.arrayOffset() + input.position(), n);
      input.position(input.limit());
    } else {
      super.engineUpdate(input);
    }
  }

  @Override
  protected byte[] engineDigest() {
    byte[] digest = new byte[32];
    crypto.SHA256_Final(digest, ctx);
    crypto.SHA256_Init(ctx);
    return digest;
  }

  @Override
  protected void engineReset() {
    crypto.SHA256_Init(ctx);
  }

  @Override
  public Object clone() throws CloneNotSupportedException {
    LibcryptoSha256 copy = (LibcryptoSha256) super.clone();
    copy.ctx = ctx.clone();
    return copy;
  }

  /**
   * Binds libcrypto and installs its SHA-256 ahead of the JDK's, once it gives the JDK's results; false (and the JDK's
   * stays) when the library is missing or disagrees.
   */
  public static synchronized boolean install() {
    if (Security.getProvider(NAME) != null) {
      return true;
    }
    Crypto crypto;
    try {
      crypto = bind();
    } catch (LinkageError | RuntimeException e) {
      System.err.println("flatpull: libcrypto not found, SHA-256 is the JDK's: " + e.getMessage());
      return false;
    }
    if (!agreesWithTheJdk(crypto)) {
      System.err.println("flatpull: libcrypto's SHA-256 disagrees with the JDK's; the JDK's is used");
      return false;
    }
    Security.insertProviderAt(new LibcryptoProvider(crypto), 1);
    return true;
  }

  /** The provider of one service: SHA-256 (by its standard names). */
  private static final class LibcryptoProvider extends Provider {
    LibcryptoProvider(Crypto crypto) {
      super(NAME, "1.0", "SHA-256 of the system's libcrypto");
      putService(new Provider.Service(this, "MessageDigest", "SHA-256", LibcryptoSha256.class.getName(),
          List.of("SHA256", "2.16.840.1.101.3.4.2.1", "OID.2.16.840.1.101.3.4.2.1"), null) {
        @Override
        public Object newInstance(Object constructorParameter) {
          return new LibcryptoSha256(crypto);
        }
      });
    }
  }

  private static Crypto bind() {
    // The runtime package's soname first: the unversioned name exists only where the development package is.
    try {
      return LibraryLoader.create(Crypto.class).failImmediately().load("libcrypto.so.3");
    } catch (LinkageError | RuntimeException e) {
      return LibraryLoader.create(Crypto.class).failImmediately().load("crypto");
    }
  }

  /** The same digests as the JDK's for lengths around SHA-256's 64-byte block, split at odd places, and cloned. */
  static boolean agreesWithTheJdk(Crypto crypto) {
    try {
      byte[] data = new byte[70_000];
      new java.util.Random(20261207).nextBytes(data);
      for (int length : new int[] {0, 1, 55, 56, 63, 64, 65, 127, 128, 16_384, 70_000}) {
        MessageDigest jdk = MessageDigest.getInstance("SHA-256", "SUN");
        byte[] expected = jdk.digest(Arrays.copyOf(data, length));
        LibcryptoSha256 ours = new LibcryptoSha256(crypto);
        int cut = length / 3;
        ours.engineUpdate(data, 0, cut);
        LibcryptoSha256 copy = (LibcryptoSha256) ours.clone();
        ours.engineUpdate(data, cut, length - cut);
        copy.engineUpdate(ByteBuffer.wrap(data, cut, length - cut));
        if (!Arrays.equals(expected, ours.engineDigest()) || !Arrays.equals(expected, copy.engineDigest())) {
          return false;
        }
      }
      return true;
    } catch (NoSuchAlgorithmException | NoSuchProviderException | CloneNotSupportedException e) {
      return false;
    }
  }

  /** For tests: libcrypto bound, not installed. */
  static Crypto bound() {
    return bind();
  }
}
