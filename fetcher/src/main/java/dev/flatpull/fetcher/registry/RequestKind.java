package dev.flatpull.fetcher.registry;

/** What a registry request is for; a bounded set, so it can tag metrics. */
public enum RequestKind {
  MANIFEST,
  BLOB,
  BLOB_RANGE,
  TOKEN,
  /** The referrers API ({@code /referrers/DIGEST}). */
  REFERRERS,
  /** The repository's tag listing ({@code /tags/list}). */
  TAGS,
  PUSH
}
