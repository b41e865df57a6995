package dev.flatpull.fetcher.oci;

import dev.flatpull.core.Digest;

/** A document a registry serves at {@code /manifests/REF}: an image manifest or an image index. */
public sealed interface OciDocument permits ImageManifest, ImageIndex {
  String mediaType();

  /** The digest of the exact bytes served, which is how other documents refer to this one. */
  Digest digest();

  /** The exact bytes served: needed to push the document unchanged. */
  byte[] raw();
}
