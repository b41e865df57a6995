package dev.flatpull.fetcher.layer;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The union of an image's layers as overlayfs would present it, for looking up single paths: the topmost layer that
 * has a path wins, whiteouts ({@code .wh.NAME}) and opaque markers ({@code .wh..wh..opq}) hide what lies below, and
 * symlinks (absolute or relative, in any component) are followed within the image. Layers are opened lazily, top
 * first, so a file found in an upper layer never touches the lower ones.
 */
public final class MergedLayers {
  private static final int MAX_SYMLINKS = 40;

  /** Opens the layer at an index (0 = bottom) on first use. */
  @FunctionalInterface
  public interface LayerSource {
    LazyLayer open(int index) throws IOException;
  }

  /** An entry and the layer it was found in. */
  public record Found(LazyLayer layer, LayerEntry entry) {}

  private final int count;
  private final LayerSource source;
  private final LazyLayer[] opened;

  public MergedLayers(int count, LayerSource source) {
    this.count = count;
    this.source = source;
    this.opened = new LazyLayer[count];
  }

  private LazyLayer layer(int i) throws IOException {
    if (opened[i] == null) {
      opened[i] = source.open(i);
    }
    return opened[i];
  }

  /**
   * Resolves {@code path}, following symlinks in every component including the last.
   *
   * @throws FileNotFoundException when it does not exist in the merged view
   */
  public Found resolve(String path) throws IOException {
    List<String> pending = new ArrayList<>(split(path));
    List<String> resolved = new ArrayList<>();
    int hops = 0;
    Found found = null;
    while (!pending.isEmpty()) {
      String comp = pending.remove(0);
      if (comp.equals("..")) {
        if (!resolved.isEmpty()) {
          resolved.remove(resolved.size() - 1);
        }
        found = null;
        continue;
      }
      resolved.add(comp);
      String candidate = String.join("/", resolved);
      Optional<Found> f = lookup(candidate);
      if (f.isEmpty()) {
        throw new FileNotFoundException("'" + path + "' does not exist in the image (no '" + candidate + "')");
      }
      found = f.get();
      if (found.entry().type() == EntryType.SYMLINK) {
        if (++hops > MAX_SYMLINKS) {
          throw new IOException("too many levels of symbolic links resolving '" + path + "'");
        }
        String target = found.entry().linkName();
        resolved.remove(resolved.size() - 1);
        if (target.startsWith("/")) {
          resolved.clear();
        }
        List<String> next = new ArrayList<>(split(target));
        next.addAll(pending);
        pending = next;
        found = null;
      } else if (!pending.isEmpty() && found.entry().type() != EntryType.DIR) {
        throw new FileNotFoundException("'" + path + "': '" + candidate + "' is not a directory");
      }
    }
    if (found == null) {
      throw new FileNotFoundException("'" + path + "' names a directory, not a file");
    }
    return found;
  }

  /** The topmost visible entry at a clean path, without following symlinks. */
  public Optional<Found> lookup(String clean) throws IOException {
    for (int i = count - 1; i >= 0; i--) {
      LazyLayer l = layer(i);
      LayerIndex idx = l.index();
      Optional<LayerEntry> e = idx.entry(clean);
      if (e.isPresent() && !e.get().isWhiteout() && !e.get().isOpaqueMarker()) {
        return Optional.of(new Found(l, e.get()));
      }
      if (hidesBelow(idx, clean)) {
        return Optional.empty();
      }
    }
    return Optional.empty();
  }

  /** Whether this layer whites out {@code path} or one of its ancestors, or makes an ancestor opaque. */
  private static boolean hidesBelow(LayerIndex idx, String path) {
    String p = path;
    boolean self = true;
    while (!p.isEmpty()) {
      int slash = p.lastIndexOf('/');
      String parent = slash < 0 ? "" : p.substring(0, slash);
      String base = slash < 0 ? p : p.substring(slash + 1);
      String prefix = parent.isEmpty() ? "" : parent + "/";
      if (idx.entry(prefix + LayerEntry.WHITEOUT_PREFIX + base).isPresent()) {
        return true;
      }
      if (!parent.isEmpty() || !self) {
        if (idx.entry(prefix + LayerEntry.OPAQUE_MARKER).isPresent()) {
          return true;
        }
        Optional<LayerEntry> ancestor = parent.isEmpty() ? Optional.empty() : idx.entry(parent);
        if (ancestor.isPresent() && ancestor.get().type() != EntryType.DIR) {
          return true;
        }
      }
      self = false;
      p = parent;
    }
    return false;
  }

  private static List<String> split(String path) {
    List<String> out = new ArrayList<>();
    for (String s : path.split("/")) {
      if (!s.isEmpty() && !s.equals(".")) {
        out.add(s);
      }
    }
    return out;
  }
}
