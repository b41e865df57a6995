package dev.flatpull.config;

/**
 * Upper bounds on what the fetcher accepts from a registry. They stop hostile or broken input (a decompression bomb, a
 * TOC of millions of entries, a manifest of gigabytes) before it exhausts memory or disk.
 *
 * @param maxManifestBytes largest manifest or index document
 * @param maxTocBytes largest TOC, compressed or decompressed
 * @param maxTocEntries most entries in one TOC
 * @param maxChunkBytes largest decompressed chunk, and largest compressed range fetched for one chunk
 * @param maxLayerBytes largest layer fetched whole (plain layers, conversion)
 */
public record FetchLimits(
    long maxManifestBytes, long maxTocBytes, long maxTocEntries, long maxChunkBytes, long maxLayerBytes) {
  public static final FetchLimits DEFAULTS = new FetchLimits(4L << 20, 256L << 20, 4_000_000, 64L << 20, 64L << 30);

  public FetchLimits {
    if (maxManifestBytes <= 0 || maxTocBytes <= 0 || maxTocEntries <= 0 || maxChunkBytes <= 0 || maxLayerBytes <= 0) {
      throw new IllegalArgumentException("fetch limits must be positive");
    }
  }
}
