package dev.flatpull.fuse;

import dev.flatpull.core.Digest;
import dev.flatpull.core.NamedFiles;
import dev.flatpull.fetcher.layer.LayerChunk;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.pagecache.PageCache;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.BooleanSupplier;

/**
 * The backing files of FUSE passthrough: a layer's regular file, assembled whole from its verified chunks in the page
 * cache, for the kernel to read as a local file ({@code FOPEN_PASSTHROUGH}; see {@link KernelSession}). The kernel
 * reads a backing file without this process, so nothing goes into one that was not verified against its digest when
 * it was assembled, and none is handed out for a file whose chunks are not all verified on the node: a file never
 * read, or read in part, is served through FUSE reads as before.
 *
 * <p>Backing files are kept as the page cache's named files ({@link NamedFiles}: root-only, 0600 in a 0700 directory,
 * written whole and synced before they are found under their name, counted in the disk budget and evicted by
 * recency). A backing file's name is a digest of the file's size and its chunks' offsets, sizes and digests, so a file
 * of the same content in any layer or image shares one. Assembly runs on {@code assembler} (off the FUSE threads, once
 * reads are quiet), asked for when a complete file is opened or released without one: a start that read a file whole
 * leaves its backing file for the next start. Thread-safe.
 */
public final class BackingFiles {
  private static final System.Logger LOG = System.getLogger(BackingFiles.class.getName());
  private static final String PREFIX = "backing-";

  /** No passthrough: every file is read through FUSE. */
  public static final BackingFiles NONE = new BackingFiles(null, Long.MAX_VALUE, Runnable::run, () -> false);

  private final PageCache cache;
  private final long minBytes;
  private final Executor assembler;
  private final BooleanSupplier allowed;
  private final Set<String> assembling = ConcurrentHashMap.newKeySet();
  private final LongAdder assembled = new LongAdder();
  private final LongAdder assembledBytes = new LongAdder();
  private final LongAdder failed = new LongAdder();

  /**
   * @param cache where the chunks are verified and the backing files kept
   * @param minBytes the smallest file given a backing file
   * @param assembler runs each assembly (the manager's: once reads are quiet)
   * @param allowed asked before every use: false while reads are being recorded, which a passthrough read bypasses
   */
  public BackingFiles(PageCache cache, long minBytes, Executor assembler, BooleanSupplier allowed) {
    this.cache = cache;
    this.minBytes = Math.max(1, minBytes);
    this.assembler = assembler;
    this.allowed = allowed;
  }

  /** Whether passthrough is ever used (not {@link #NONE}). */
  boolean enabled() {
    return cache != null;
  }

  /**
   * The backing file of {@code file} when every chunk of it is verified in the page cache and its backing file is
   * assembled; otherwise empty, and its assembly asked for when the chunks are all there. The caller must cope with
   * the file's eviction at any time (opening it then fails).
   */
  Optional<Path> find(LayerEntry file) throws IOException {
    if (!eligible(file) || !complete(file)) {
      return Optional.empty();
    }
    Optional<Path> kept = cache.namedFiles().find(name(file));
    if (kept.isEmpty()) {
      assemble(file);
    }
    return kept;
  }

  /** Asks for the assembly of {@code file}'s backing file if its chunks are all verified on the node and it has none. */
  void offer(LayerEntry file) {
    if (eligible(file) && complete(file)) {
      assemble(file);
    }
  }

  /** Backing files assembled, their bytes, and assemblies that failed (a chunk evicted meanwhile, a full disk). */
  public record Stats(long assembled, long bytes, long failed) {}

  public Stats stats() {
    return new Stats(assembled.sum(), assembledBytes.sum(), failed.sum());
  }

  /** The name {@code file}'s backing file is kept under: the same for the same content in any layer. */
  static String name(LayerEntry file) {
    MessageDigest md = Digest.newMessageDigest("sha256");
    ByteBuffer b = ByteBuffer.allocate(24);
    md.update(b.putLong(0, file.size()).array(), 0, 8);
    for (LayerChunk c : file.chunks()) {
      md.update(b.putLong(0, c.fileOffset()).putLong(8, c.size()).putLong(16, c.stored().isEmpty() ? 0 : 1).array());
      if (!c.stored().isEmpty()) {
        md.update(c.digest().toString().getBytes(StandardCharsets.US_ASCII));
      }
    }
    return PREFIX + Digest.of("sha256", md).hex();
  }

  private boolean eligible(LayerEntry file) {
    return cache != null && file.size() >= minBytes && allowed.getAsBoolean();
  }

  /** Whether every stored chunk of {@code file} is verified in the page cache (holes have none). */
  private boolean complete(LayerEntry file) {
    for (LayerChunk c : file.chunks()) {
      if (!c.stored().isEmpty() && !cache.contains(c.digest())) {
        return false;
      }
    }
    return true;
  }

  private void assemble(LayerEntry file) {
    String name = name(file);
    if (!assembling.add(name)) {
      return;
    }
    try {
      assembler.execute(() -> {
        try {
          if (cache.namedFiles().find(name).isEmpty()) {
            cache.namedFiles().keep(name, ch -> write(file, ch));
            assembled.increment();
            assembledBytes.add(file.size());
          }
        } catch (IOException | RuntimeException e) {
          failed.increment();
          LOG.log(System.Logger.Level.DEBUG, "no backing file for /" + file.name() + ": " + e.getMessage());
        } finally {
          assembling.remove(name);
        }
      });
    } catch (RejectedExecutionException stopping) {
      assembling.remove(name);
    }
  }

  /**
   * Writes {@code file}'s content, chunk by chunk from the page cache (each verified against its digest as it is read:
   * the disk tier checks what it reads), holes left as holes, then syncs it: the kernel will read it without checking,
   * so a power loss must not leave a renamed file whose blocks never reached the disk.
   */
  private void write(LayerEntry file, FileChannel ch) throws IOException {
    for (LayerChunk c : file.chunks()) {
      if (c.stored().isEmpty()) {
        continue;
      }
      byte[] bytes = cache.peek(c.digest()).orElseThrow(
          () -> new IOException("chunk " + c.digest() + " left the page cache during assembly"));
      if (bytes.length != c.size()) {
        throw new IOException("chunk " + c.digest() + " has " + bytes.length + " bytes, the index says " + c.size());
      }
      ByteBuffer buf = ByteBuffer.wrap(bytes);
      long at = c.fileOffset();
      while (buf.hasRemaining()) {
        at += ch.write(buf, at);
      }
    }
    if (ch.size() < file.size()) {
      // A trailing hole: the file's length, without writing its zeros.
      ch.write(ByteBuffer.allocate(1), file.size() - 1);
    }
    ch.force(false);
  }
}
