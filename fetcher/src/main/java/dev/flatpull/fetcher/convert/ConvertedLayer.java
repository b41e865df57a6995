package dev.flatpull.fetcher.convert;

import dev.flatpull.core.Digest;
import java.nio.file.Path;
import java.util.Map;

/**
 * A layer written in a lazy format.
 *
 * @param blob the file holding the compressed layer
 * @param diffId digest of the uncompressed tar stream, for the image config's {@code rootfs.diff_ids}
 * @param annotations what the layer descriptor must carry (TOC digest and position)
 */
public record ConvertedLayer(
    Path blob, Digest digest, long size, Digest diffId, long uncompressedSize, Digest tocDigest,
    Map<String, String> annotations, int entries, int chunks) {}
