package dev.flatpull.core;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Objects;

/**
 * A content digest in the OCI form {@code algorithm:hex}, e.g. {@code sha256:e3b0...}.
 *
 * <p>Only {@code sha256} and {@code sha512} are accepted: they are the algorithms the OCI image spec registers, and a
 * digest of any other algorithm could not be verified. Instances are immutable and validated at construction.
 */
public record Digest(String algorithm, String hex) {
  public Digest {
    Objects.requireNonNull(algorithm, "algorithm");
    Objects.requireNonNull(hex, "hex");
    int length =
        switch (algorithm) {
          case "sha256" -> 64;
          case "sha512" -> 128;
          default -> throw new IllegalArgumentException("unsupported digest algorithm '" + algorithm + "'");
        };
    if (!isLowerHex(hex, length)) {
      throw new IllegalArgumentException("malformed " + algorithm + " digest hex '" + hex + "'");
    }
  }

  // A loop, not a regex: TOCs carry a digest per chunk, and parsing them is on the cold-start path.
  private static boolean isLowerHex(String s, int length) {
    if (s.length() != length) {
      return false;
    }
    for (int i = 0; i < length; i++) {
      char c = s.charAt(i);
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
        return false;
      }
    }
    return true;
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
    return new Digest(algorithm, HexFormat.of().formatHex(md.digest()));
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
    return hex.substring(0, 12);
  }

  @Override
  public String toString() {
    return algorithm + ":" + hex;
  }
}
