package dev.flatpull.fetcher.layer;

import com.github.luben.zstd.ZstdInputStream;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.BoundedInputStream;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.MediaTypes.LayerCompression;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarReader;
import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.zip.GZIPInputStream;

/**
 * Indexes a layer that has no TOC: the blob, already fetched whole and verified against its descriptor, is
 * decompressed to a local tar file, and every regular file's data is located in it and split into chunks whose digests
 * are computed here, so reads of plain layers pass the same verification as lazy ones.
 */
public final class PlainLayerIndexer {
  /** Chunk size for local plain layers: small enough that a 4 KiB read does not hash megabytes. */
  static final int CHUNK_SIZE = 256 * 1024;

  private PlainLayerIndexer() {}

  /** Decompresses a verified blob into {@code tarFile}, unless it already exists, and opens it. */
  public static LazyLayer open(Descriptor layer, Path verifiedBlob, Path tarFile, FetchLimits limits) throws IOException {
    LayerCompression compression = MediaTypes.layerCompression(layer.mediaType());
    if (!Files.exists(tarFile)) {
      Path tmp = tarFile.resolveSibling(tarFile.getFileName() + ".partial");
      try (InputStream in = decompressed(layer, compression, Files.newInputStream(verifiedBlob), limits);
          OutputStream out = Files.newOutputStream(tmp)) {
        in.transferTo(out);
      } catch (IOException e) {
        Files.deleteIfExists(tmp);
        throw e;
      }
      Files.move(tmp, tarFile, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }
    LayerIndex index = index(layer.digest(), tarFile, limits);
    return new LazyLayer(index, fileReader(tarFile), 0);
  }

  /** The diff_id of a verified layer blob: the digest of its uncompressed tar stream, read to its end. */
  public static Digest diffId(Descriptor layer, InputStream verifiedBlob, FetchLimits limits) throws IOException {
    MessageDigest md = Digest.newMessageDigest("sha256");
    try (InputStream in = decompressed(layer, MediaTypes.layerCompression(layer.mediaType()), verifiedBlob, limits)) {
      byte[] buf = new byte[1 << 16];
      int n;
      while ((n = in.read(buf)) > 0) {
        md.update(buf, 0, n);
      }
    }
    return Digest.of("sha256", md);
  }

  /** The uncompressed tar stream of a layer blob, bounded by the layer size limit (decompression bombs). */
  public static InputStream decompressed(Descriptor layer, LayerCompression compression, InputStream blob, FetchLimits limits)
      throws IOException {
    InputStream raw = new BufferedInputStream(blob, 1 << 16);
    InputStream plain =
        switch (compression) {
          case GZIP -> new GZIPInputStream(raw, 1 << 16);
          case ZSTD -> new ZstdInputStream(raw);
          case NONE -> raw;
        };
    return new BoundedInputStream(plain, "layer " + layer.digest() + " decompressed", limits.maxLayerBytes());
  }

  static LayerIndex index(Digest blob, Path tarFile, FetchLimits limits) throws IOException {
    String where = "plain layer " + blob;
    List<LayerEntry> entries = new ArrayList<>();
    try (InputStream in = new BufferedInputStream(Files.newInputStream(tarFile), 1 << 16)) {
      TarReader tar = new TarReader(in);
      TarHeader h;
      while ((h = tar.next()) != null) {
        if (entries.size() >= limits.maxTocEntries()) {
          throw new dev.flatpull.core.SizeLimitExceededException(where + ": entry count", limits.maxTocEntries());
        }
        String name = EntryNames.clean(h.name(), where);
        if (name.isEmpty()) {
          name = "";
        }
        EntryType type = typeOf(h, where);
        List<LayerChunk> chunks = new ArrayList<>();
        Optional<Digest> fileDigest = Optional.empty();
        if (type == EntryType.REG && h.size() > 0) {
          long base = tar.dataOffset();
          MessageDigest whole = Digest.newMessageDigest("sha256");
          InputStream data = tar.data();
          byte[] buf = new byte[CHUNK_SIZE];
          for (long off = 0; off < h.size(); off += CHUNK_SIZE) {
            int n = (int) Math.min(CHUNK_SIZE, h.size() - off);
            int got = data.readNBytes(buf, 0, n);
            if (got != n) {
              throw new LayerFormatException(where + ": '" + name + "' is truncated");
            }
            whole.update(buf, 0, n);
            chunks.add(new LayerChunk(off, n, new ByteRange(base + off, n), 0, Digest.sha256(buf, 0, n)));
          }
          fileDigest = Optional.of(Digest.of("sha256", whole));
        }
        String link = h.linkName();
        if (type == EntryType.HARDLINK) {
          link = EntryNames.clean(link, where + " hard link '" + name + "'");
        }
        entries.add(new LayerEntry(
            name, type, type == EntryType.REG ? h.size() : 0, h.mode(), (int) h.uid(), (int) h.gid(), h.userName(),
            h.groupName(), h.modTime(), link, h.devMajor(), h.devMinor(), h.xattrs(), fileDigest, chunks));
      }
    }
    return new LayerIndex(LayerFormat.PLAIN, blob, Optional.empty(), ChunkCompression.NONE, entries, List.of());
  }

  static EntryType typeOf(TarHeader h, String where) throws LayerFormatException {
    return switch (h.type()) {
      case TarHeader.REG -> EntryType.REG;
      case TarHeader.HARDLINK -> EntryType.HARDLINK;
      case TarHeader.SYMLINK -> EntryType.SYMLINK;
      case TarHeader.CHAR -> EntryType.CHAR;
      case TarHeader.BLOCK -> EntryType.BLOCK;
      case TarHeader.DIR -> EntryType.DIR;
      case TarHeader.FIFO -> EntryType.FIFO;
      default -> throw new LayerFormatException(where + ": '" + h.name() + "' has unsupported tar type '" + h.type() + "'");
    };
  }

  /** Reads ranges of a local file. */
  static BlobReader fileReader(Path file) {
    return range -> {
      try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
        ByteBuffer buf = ByteBuffer.allocate((int) range.length());
        long pos = range.offset();
        while (buf.hasRemaining()) {
          int n = ch.read(buf, pos);
          if (n < 0) {
            throw new java.io.EOFException(file + " ends before " + range);
          }
          pos += n;
        }
        return buf.array();
      }
    };
  }
}
