package dev.flatpull.fetcher.layer;

import dev.flatpull.core.Digest;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * One file-system entry of a layer, as its TOC (or local index) describes it. Names are relative, clean paths without
 * a leading {@code ./} or {@code /} and without a trailing {@code /}; the layer root is {@code ""}.
 *
 * @param mode permission bits with setuid, setgid and sticky ({@code 07777}); the type is {@link #type}
 * @param linkName target of a symlink, or the name of the entry a hard link refers to
 * @param xattrs extended attributes, values as raw bytes
 * @param digest digest of the whole content of a regular file, when the TOC gives it
 * @param chunks the content of a regular file, in file order and contiguous; empty for every other type
 */
public record LayerEntry(
    String name, EntryType type, long size, int mode, int uid, int gid, String userName, String groupName,
    Instant modTime, String linkName, int devMajor, int devMinor, Map<String, byte[]> xattrs, Optional<Digest> digest,
    List<LayerChunk> chunks) {
  public static final String WHITEOUT_PREFIX = ".wh.";
  public static final String OPAQUE_MARKER = ".wh..wh..opq";

  public LayerEntry {
    xattrs = Map.copyOf(xattrs);
    chunks = List.copyOf(chunks);
  }

  /** The last path component. */
  public String baseName() {
    int slash = name.lastIndexOf('/');
    return slash < 0 ? name : name.substring(slash + 1);
  }

  /** The directory holding this entry ({@code ""} for the root's children). */
  public String parent() {
    int slash = name.lastIndexOf('/');
    return slash < 0 ? "" : name.substring(0, slash);
  }

  /** An AUFS/OCI whiteout ({@code .wh.NAME}): NAME is deleted from the layers below. */
  public boolean isWhiteout() {
    // Compared in place: asked of every entry of a layer when its tree is built, a base name each was garbage.
    return name.startsWith(WHITEOUT_PREFIX, name.lastIndexOf('/') + 1) && !isOpaqueMarker();
  }

  /** The opaque-directory marker: the parent directory hides everything below it. */
  public boolean isOpaqueMarker() {
    int start = name.lastIndexOf('/') + 1;
    return name.length() - start == OPAQUE_MARKER.length() && name.startsWith(OPAQUE_MARKER, start);
  }
}
