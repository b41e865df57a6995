package dev.flatpull.core;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Objects;

/**
 * A content digest in the OCI form {@code algorithm:hex}, e.g. {@code sha256:e3b0...}.
 *
 * <p>Only {@code sha256} and {@code sha512} are accepted: they are the algorithms the OCI image spec registers, and a
 * digest of any other algorithm could not be verified. Instances are immutable and validated at construction; equal
 * when algorithm and bytes are.
 */
public final class Digest {
  // Kept as bytes, not hex text: a layer's index holds a digest per chunk, and a million of them as strings cost
  // 56 bytes each more (see docs/benchmarks.md, index memory).
  private final String algorithm;
  private final byte[] bytes;
  private final int hash;

  /**
   * @param algorithm {@code sha256} or {@code sha512}
   * @param hex the digest in lower-case hex, of the algorithm's length
   */
  public Digest(String algorithm, String hex) {
    Objects.requireNonNull(algorithm, "algorithm");
    Objects.requireNonNull(hex, "hex");
    int length =
        switch (algorithm) {
          case "sha256" -> 64;
          case "sha512" -> 128;
          default -> throw new IllegalArgumentException("unsupported digest algorithm '" + algorithm + "'");
        };
    byte[] parsed = hex.length() == length ? lowerHex(hex, 0, length) : null;
    if (parsed == null) {
      throw new IllegalArgumentException("malformed " + algorithm + " digest hex '" + hex + "'");
    }
    this.algorithm = length == 64 ? "sha256" : "sha512";
    this.bytes = parsed;
    this.hash = Arrays.hashCode(bytes) * 31 + length;
  }

  private Digest(String algorithm, byte[] bytes) {
    this.algorithm = algorithm;
    this.bytes = bytes;
    this.hash = Arrays.hashCode(bytes) * 31 + bytes.length * 2;
  }

  public String algorithm() {
    return algorithm;
  }

  /** The digest in lower-case hex (made on each call). */
  public String hex() {
    return HexFormat.of().formatHex(bytes);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof Digest d && d.hash == hash && d.algorithm.equals(algorithm) && Arrays.equals(d.bytes, bytes);
  }

  @Override
  public int hashCode() {
    return hash;
  }

  /**
   * The bytes that the {@code length} lower-case hex digits of {@code s} at {@code from} spell, or null when they are
   * not such digits: checked and decoded in one loop, not a regex or two passes (a TOC's parse decodes a digest per
   * chunk on the cold-start path, in C1 code).
   */
  private static byte[] lowerHex(String s, int from, int length) {
    // Its bytes first (a copy, for Latin-1 text; any other character becomes '?'): charAt is a call per character in
    // C1 code.
    byte[] text = s.getBytes(java.nio.charset.StandardCharsets.ISO_8859_1);
    byte[] out = new byte[length / 2];
    for (int k = 0; k < out.length; k++) {
      int hi = nibble(text[from + 2 * k]);
      int lo = nibble(text[from + 2 * k + 1]);
      if ((hi | lo) < 0) {
        return null;
      }
      out[k] = (byte) (hi << 4 | lo);
    }
    return out;
  }

  /** The value of a lower-case hex digit, or -1. */
  private static int nibble(byte c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  }

  /**
   * Parses {@code algorithm:hex}.
   *
   * @throws IllegalArgumentException naming the text when it is not a valid digest
   */
  public static Digest parse(String text) {
    Objects.requireNonNull(text, "digest text");
    int colon = text.indexOf(':');
    if (colon <= 0) {
      throw new IllegalArgumentException("malformed digest '" + text + "': expected algorithm:hex");
    }
    // sha256, the digest of nearly every chunk of a TOC, parsed in place: two substrings per chunk were garbage.
    if (colon == 6 && text.length() == 71 && text.startsWith("sha256")) {
      byte[] parsed = lowerHex(text, colon + 1, 64);
      if (parsed != null) {
        return new Digest("sha256", parsed);
      }
    }
    return new Digest(text.substring(0, colon), text.substring(colon + 1));
  }

  /** The SHA-256 digest of {@code bytes[offset, offset+length)}. */
  public static Digest sha256(byte[] bytes, int offset, int length) {
    MessageDigest md = newMessageDigest("sha256");
    md.update(bytes, offset, length);
    return of("sha256", md);
  }

  public static Digest sha256(byte[] bytes) {
    return sha256(bytes, 0, bytes.length);
  }

  /** A fresh {@link MessageDigest} for an algorithm this type accepts. */
  public static MessageDigest newMessageDigest(String algorithm) {
    try {
      return MessageDigest.getInstance(
          switch (algorithm) {
            case "sha256" -> "SHA-256";
            case "sha512" -> "SHA-512";
            default -> throw new IllegalArgumentException("unsupported digest algorithm '" + algorithm + "'");
          });
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("the JDK lacks " + algorithm, e);
    }
  }

  /** Completes {@code md} (which the caller must not use again) into a digest of the given algorithm. */
  public static Digest of(String algorithm, MessageDigest md) {
    byte[] b = md.digest();
    String a = switch (algorithm) {
      case "sha256" -> "sha256";
      case "sha512" -> "sha512";
      default -> throw new IllegalArgumentException("unsupported digest algorithm '" + algorithm + "'");
    };
    if (b.length * 2 != (a.equals("sha256") ? 64 : 128)) {
      throw new IllegalArgumentException(algorithm + " digest of " + b.length + " bytes");
    }
    return new Digest(a, b);
  }

  /** The digest's raw bytes, as {@link #ofRaw} takes them (a copy). */
  public byte[] raw() {
    return bytes.clone();
  }

  /**
   * A digest from its raw bytes, as {@link #raw} gives them (a binary file's encoding of it).
   *
   * @throws IllegalArgumentException when the length is not the algorithm's
   */
  public static Digest ofRaw(String algorithm, byte[] raw) {
    int length = switch (algorithm) {
      case "sha256" -> 32;
      case "sha512" -> 64;
      default -> throw new IllegalArgumentException("unsupported digest algorithm '" + algorithm + "'");
    };
    if (raw.length != length) {
      throw new IllegalArgumentException(algorithm + " digest of " + raw.length + " bytes");
    }
    return new Digest(length == 32 ? "sha256" : "sha512", raw.clone());
  }

  /** A fresh {@link MessageDigest} of this digest's algorithm, to check content against it. */
  public MessageDigest newMessageDigest() {
    return newMessageDigest(algorithm);
  }

  /** The digest of {@code bytes[offset, offset+length)} in this digest's algorithm. */
  public Digest recompute(byte[] bytes, int offset, int length) {
    MessageDigest md = newMessageDigest();
    md.update(bytes, offset, length);
    return of(algorithm, md);
  }

  /**
   * Checks that {@code bytes[offset, offset+length)} has this digest.
   *
   * @param subject what the bytes are, for the error message (e.g. "chunk 3 of usr/bin/python3")
   * @throws DigestMismatchException carrying both digests when they differ
   */
  public void verify(String subject, byte[] bytes, int offset, int length) throws DigestMismatchException {
    Digest actual = recompute(bytes, offset, length);
    if (!actual.equals(this)) {
      throw new DigestMismatchException(subject, this, actual);
    }
  }

  /** The first 12 hex digits, for log lines and directory names that humans read. */
  public String shortHex() {
    return HexFormat.of().formatHex(bytes, 0, 6);
  }

  @Override
  public String toString() {
    return algorithm + ":" + hex();
  }
}
