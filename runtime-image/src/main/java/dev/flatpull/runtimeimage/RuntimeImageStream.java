package dev.flatpull.runtimeimage;

import com.github.luben.zstd.Zstd;
import dev.flatpull.config.RuntimeImageSettings.Limits;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import dev.flatpull.core.VerifiedContent;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.pagecache.ProducerProgress;
import dev.flatpull.pagecache.Reservation;
import dev.flatpull.runtimeimage.RuntimeImageDecoder.Rejection;
import dev.flatpull.runtimeimage.RuntimeImageDecoder.RejectionKind;
import dev.flatpull.runtimeimage.RuntimeImageFormat.Layout;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Frame;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import java.io.EOFException;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * Streams one runtime image into the host-wide page cache while a container starts (docs/runtime-images.md,
 * "Loading"). Every extent whose content the node lacks is reserved in the cache before its bytes are requested, so
 * that a reader of it waits for the stream, but only while the stream advances ({@link ProducerProgress}); frames
 * are decoded and verified as they arrive, and each verified extent wakes its readers at once. Content already on the
 * node is not fetched again: on a node holding none of the image's content the blob comes in one request, otherwise
 * its index first, then only the frames that hold missing content, by range; a frame that carries no extent is never
 * fetched. Whatever does not arrive verified is given up, so its readers go to the lazy loader; nothing unverified
 * ever enters the cache. Before anything is reserved or any frame fetched, the runtime image is held to the
 * {@link RuntimeImageBounds} of its image: its index, blob and frames no larger than the image's TOCs allow, and no
 * more of the image than a working set.
 */
public final class RuntimeImageStream {
  /** The verified index of a layer of the image, awaited when the stream needs it (it is fetched in parallel). */
  @FunctionalInterface
  public interface LayerIndexes {
    LayerIndex await(Digest layer) throws IOException;

    /**
     * Whether {@link #await} of {@code layer} would answer at once (its TOC is in, or failed). While one is not, the
     * stream requests the blob and buffers its first frames, so that the runtime image is on the node when the TOCs
     * are (see {@link RuntimeImageStream#EARLY_BYTES}).
     */
    default boolean ready(Digest layer) {
      return true;
    }
  }

  /**
   * At most this many bytes of a runtime image's frames are held in memory, unchecked, while the image's TOCs are
   * still on their way: its head is requested as soon as its descriptor is known, not after the TOCs, and on a node
   * that has none of its content its frames too (a round trip and the runtime image's transfer off a cold start's
   * critical path). Nothing is reserved, decoded or stored before the TOCs have bound it; the bounds they set are
   * checked then, so a runtime image they refuse has cost at most this, and the response's receive buffers.
   */
  static final int EARLY_BYTES = 32 << 20;

  /** The largest index (decompressed) read before the TOCs are in; a larger one waits for them and their bound. */
  static final int EARLY_INDEX_BYTES = 8 << 20;

  /** What the stream brought, as it arrives. */
  public interface Delivery {
    /** Verified content of {@code path} at {@code offset} in {@code layer} entered the cache under {@code content}. */
    void delivered(Digest layer, String path, long offset, int length, Digest content);

    /**
     * Everything the stream will bring is reserved in the cache now (or it will bring nothing): readers that miss
     * from here on find its reservations. Called once per load, also when it fails.
     */
    default void announced() {}

    /**
     * The stream will bring (it is reserved) or the node already has {@code content} for {@code path} at
     * {@code offset} in {@code layer}; called for each before {@link #announced}, so that a page-granular read path
     * can find page-mode content by place.
     */
    default void planned(Digest layer, String path, long offset, int length, Digest content) {}
  }

  /**
   * How a load went.
   *
   * @param failure why the runtime image as a whole was not (fully) used, as a metric label ({@code malformed},
   *     {@code mismatch}, {@code stream_failed}); empty when every frame it needed arrived
   * @param detail a sentence for the log
   * @param contents the distinct contents (digests) the index holds: identical extents are stored once
   * @param delivered contents this stream put into the cache, and their bytes
   * @param reused contents the node already had (not fetched), and their bytes
   * @param rejected extents given up, by reason
   * @param incremental whether the index was read first and only missing frames fetched
   * @param requests registry requests for the blob
   * @param ignoredFrames frames that carry no extent, which were not fetched
   * @param headroom how close the runtime image came to its image's bounds, for the log
   */
  public record Outcome(Optional<String> failure, String detail, long contents, long delivered, long deliveredBytes,
      long reused, long reusedBytes, Map<RejectionKind, Long> rejected, boolean incremental, int requests,
      int ignoredFrames, String headroom) {
    public Outcome {
      rejected = Map.copyOf(rejected);
    }
  }

  private final RegistryClient client;
  private final PageCache cache;
  private final ProducerProgress progress;
  private final Delivery delivery;
  private final Verification trusted;
  private final Limits limits;

  /**
   * @param trusted the verification the node trusts ({@code [runtime_image] verify}): a runtime image whose index says
   *     otherwise is refused, whatever its artifact's annotations claim
   * @param limits what a runtime image may ask of the node, relative to its image
   */
  public RuntimeImageStream(RegistryClient client, PageCache cache, ProducerProgress progress, Delivery delivery,
      Verification trusted, Limits limits) {
    this.client = client;
    this.cache = cache;
    this.progress = progress;
    this.delivery = delivery;
    this.trusted = trusted;
    this.limits = limits;
  }

  /**
   * Loads {@code artifact}, a runtime image of {@code manifest}, into the cache.
   *
   * @throws RuntimeImageLimitException when it asks more than its image allows (nothing was reserved)
   * @throws RuntimeImageFormatException when the artifact or its index is malformed (nothing was reserved)
   * @throws RuntimeImageMismatchException when it does not belong to the image (nothing was reserved)
   * @throws IOException when the artifact manifest or a layer's index cannot be had
   */
  public Outcome load(RuntimeImageArtifact artifact, ImageManifest manifest, LayerIndexes tocs) throws IOException {
    Descriptor blob = RuntimeImagePublisher.blobToLoad(client, artifact, manifest.digest());
    long earlyIndexEnd = earlyIndexEnd(blob);
    if (!Early.ready(manifest, tocs) && earlyIndexEnd > RuntimeImageFormat.HEADER_SIZE) {
      return loadEarly(blob, manifest, tocs, earlyIndexEnd);
    }
    Load load = newLoad(manifest, tocs, blob);
    boolean incremental = holdsAny(load.layers.values());
    return finish(load, blob, incremental, null, () -> {
      if (!incremental) {
        load.requests++;
        client.streamRange(blob.digest(), new ByteRange(0, blob.size()), in -> {
          try {
            load.whole(new Progressing(in));
          } catch (RuntimeImageFormatException | RuntimeImageMismatchException e) {
            // Not the registry's fault: no retry (the client retries what it throws as a transport failure).
            throw new java.io.UncheckedIOException(e);
          }
          return null;
        });
      } else {
        Head head = readHead(blob, load.bounds);
        load.requests += head.requests();
        load.begin(RuntimeImageFormat.readIndex(head.bytes(), load.bounds.indexBytes()));
      }
    });
  }

  /**
   * A runtime image of another version of the image, its index read and re-pointed at this version
   * ({@link BorrowedIndex}), ready to be streamed by {@link #borrow}.
   *
   * @param subject the image manifest it was built for (another version)
   * @param head the blob's header and index, as read, and the requests that read them
   * @param layout the re-pointed index, with the blob's frames
   */
  public record Borrowable(RuntimeImageArtifact artifact, Digest subject, Descriptor blob, Head head, Layout layout,
      BorrowedIndex.Rebound rebound) {}

  /** A blob's header and index, and the range requests that read them. */
  public record Head(byte[] bytes, int requests) {}

  /**
   * Reads {@code blob}'s header and index, held to {@code bounds}: in one request where its artifact says where the
   * index ends, else the header first.
   */
  private Head readHead(Descriptor blob, RuntimeImageBounds bounds) throws IOException {
    long indexEnd = indexEnd(blob, bounds.indexEnd());
    byte[] head = client.readRange(blob.digest(), new ByteRange(0, indexEnd));
    if (indexEnd != RuntimeImageFormat.HEADER_SIZE) {
      return new Head(head, 1);
    }
    int indexLength = RuntimeImageFormat.indexLength(head);
    bounds.checkIndexLength(indexLength);
    return new Head(client.readRange(blob.digest(), new ByteRange(0, RuntimeImageFormat.HEADER_SIZE
        + (long) indexLength)), 2);
  }

  /**
   * Reads the index of {@code artifact}, a runtime image of the image manifest {@code subject} (another version of
   * {@code manifest}), held to this image's bounds, and re-points it at {@code manifest}: one or two range requests.
   *
   * @throws RuntimeImageFormatException when it is malformed or not a runtime image of {@code subject}
   * @throws RuntimeImageLimitException when its index is larger than this image allows
   * @throws RuntimeImageMismatchException when it is a page-mode runtime image
   */
  public Borrowable readForBorrowing(RuntimeImageArtifact artifact, Digest subject, ImageManifest manifest,
      LayerIndexes tocs) throws IOException {
    Descriptor blob = RuntimeImagePublisher.blobToLoad(client, artifact, subject);
    // The index is read while this image's TOCs are still on their way, where its artifact says it ends within the
    // early bound (as a load's is), instead of a round trip after them; the TOCs' bounds hold it once they are in.
    Optional<Head> early = Optional.empty();
    long earlyEnd = earlyIndexEnd(blob);
    if (!Early.ready(manifest, tocs) && earlyEnd > RuntimeImageFormat.HEADER_SIZE) {
      early = Optional.of(new Head(client.readRange(blob.digest(), new ByteRange(0, earlyEnd)), 1));
    }
    Map<Digest, LayerIndex> layers = layersOf(manifest, tocs);
    RuntimeImageBounds bounds = RuntimeImageBounds.of(limits, trusted, layers.values());
    Head head = early.isPresent() && early.get().bytes().length <= bounds.indexEnd() ? early.get()
        : readHead(blob, bounds);
    bounds.checkIndexLength(RuntimeImageFormat.indexLength(head.bytes()));
    Layout old = RuntimeImageFormat.readIndex(head.bytes(), bounds.indexBytes());
    BorrowedIndex.Rebound rebound = BorrowedIndex.rebind(old.index(), manifest, layers);
    return new Borrowable(artifact, subject, blob, head, new Layout(rebound.index(), old.indexLength()), rebound);
  }

  /**
   * Streams what {@code borrowed} keeps into the cache: only the frames that carry its extents, by range, each
   * extent verified against this image's chunk digest as in {@link #load}.
   */
  public Outcome borrow(Borrowable borrowed, ImageManifest manifest, LayerIndexes tocs) throws IOException {
    Load load = newLoad(manifest, tocs, borrowed.blob());
    load.requests = borrowed.head().requests();
    load.frameUse = BorrowedIndex.MIN_FRAME_USE;
    return finish(load, borrowed.blob(), true, null, () -> load.begin(borrowed.layout()));
  }

  /** A step of a load that may fail as the registry does ({@link IOException}) or as the runtime image does. */
  @FunctionalInterface
  private interface Step {
    void run() throws IOException;
  }

  /**
   * Runs {@code first}, then fetches the frames still needed, and ends the load: what it reserved and did not bring
   * is given up. A transport failure (in {@code first}, the runs, or before, as {@code failedWith} says) ends it as
   * {@code stream_failed} with what came; a malformed or mismatched runtime image is thrown.
   */
  private Outcome finish(Load load, Descriptor blob, boolean incremental, String failedWith, Step first)
      throws IOException {
    String failure = null;
    String detail = "";
    try {
      first.run();
      if (failedWith == null) {
        fetchNeededRuns(load, blob);
      } else {
        failure = "stream_failed";
        detail = "the stream failed: " + failedWith;
      }
    } catch (java.io.UncheckedIOException e) {
      throw e.getCause();
    } catch (RuntimeImageFormatException | RuntimeImageMismatchException e) {
      throw e;
    } catch (IOException e) {
      failure = "stream_failed";
      detail = "the stream failed: " + e.getMessage();
    } finally {
      end(load);
    }
    return outcome(load, failure, detail, incremental);
  }

  /** What the first request did not bring: runs of needed frames, by range (frames between them never fetched). */
  private void fetchNeededRuns(Load load, Descriptor blob) throws IOException {
    for (int[] run : load.neededRuns()) {
      Layout layout = load.layout;
      long from = layout.frameStart(run[0]);
      Frame last = layout.index().frames().get(run[1] - 1);
      long to = layout.frameStart(run[1] - 1) + last.length();
      load.requests++;
      client.streamRange(blob.digest(), ByteRange.between(from, to), in -> {
        load.frames(new Progressing(in), from, run[0], run[1]);
        return null;
      });
    }
  }

  /** The load of {@code manifest}'s runtime image, once its layers' TOCs are in. */
  private Load newLoad(ImageManifest manifest, LayerIndexes tocs, Descriptor blob) throws IOException {
    Map<Digest, LayerIndex> layers = layersOf(manifest, tocs);
    return new Load(manifest, layers, RuntimeImageBounds.of(limits, trusted, layers.values()), blob.size());
  }

  /** The verified indexes of {@code manifest}'s lazily readable layers, in its order, once their TOCs are in. */
  private static Map<Digest, LayerIndex> layersOf(ImageManifest manifest, LayerIndexes tocs) throws IOException {
    Map<Digest, LayerIndex> layers = new LinkedHashMap<>();
    IOException unavailable = null;
    for (Descriptor d : manifest.layers()) {
      try {
        layers.put(d.digest(), tocs.await(d.digest()));
      } catch (IOException e) {
        // A layer without a TOC (plain) can have no content in a runtime image; binding refuses one that names it.
        unavailable = e;
      }
    }
    if (layers.isEmpty()) {
      throw unavailable != null ? unavailable : new IOException("the image has no layers");
    }
    return layers;
  }

  /**
   * The load while the TOCs are still on their way: the blob's head (header and index, where its artifact says the
   * index ends) is requested at once. When the index names content the node already has (a hint: it is checked once
   * the TOCs bind it), the load goes on as one that reads the index first: only the frames the node lacks are
   * fetched, once the TOCs are in. Otherwise the frames are requested at once too, and the first ones held in memory
   * ({@link Early}) until the TOCs are in; then the load binds the index and goes on from those frames and the rest of
   * the same response. Head and frames stay two requests: asked at once, the frames took a narrow link from the TOCs
   * the mounts wait for (20 ms / 200 Mbit: every image's pull slower, docs/benchmarks.md), where the head's round trip
   * lets the TOCs' transfer go first.
   */
  private Outcome loadEarly(Descriptor blob, ImageManifest manifest, LayerIndexes tocs, long indexEnd)
      throws IOException {
    byte[] head;
    try {
      head = client.readRange(blob.digest(), new ByteRange(0, indexEnd));
    } catch (IOException e) {
      Load nothing = newLoad(manifest, tocs, blob);
      nothing.requests = 1;
      return finish(nothing, blob, false, e.getMessage(), () -> {});
    }
    Optional<Early> early = Early.of(head, cache);
    // One built for another image (a stale or forged listing) is refused by its binding, no frame fetched.
    if (early.isEmpty() || early.get().nodeHasSome() || !early.get().plausible(blob.size(), limits)
        || !early.get().builtFor(manifest.digest())) {
      Load load = newLoad(manifest, tocs, blob);
      load.requests = 1;
      return finish(load, blob, true, null, () -> load.index(head, early.map(Early::layout)));
    }
    long dataStart = early.get().layout().dataStart();
    Load[] load = {null};
    String failedWith = null;
    try {
      if (dataStart < blob.size()) {
        client.streamRange(blob.digest(), ByteRange.between(dataStart, blob.size()), in -> {
          try {
            if (load[0] != null) {
              // A retried request: the frames done are skipped.
              load[0].framesFrom(new Progressing(in), dataStart);
              return null;
            }
            List<byte[]> first = early.get().frames(in, () -> Early.ready(manifest, tocs));
            try {
              load[0] = newLoad(manifest, tocs, blob);
            } catch (IOException e) {
              // The TOCs' failure, not the registry's: no retry.
              throw new java.io.UncheckedIOException(e);
            }
            load[0].requests = 2;
            load[0].index(head, Optional.of(early.get().layout()));
            List<InputStream> parts = new ArrayList<>();
            for (byte[] frame : first) {
              parts.add(new java.io.ByteArrayInputStream(frame));
            }
            parts.add(in);
            load[0].framesFrom(new Progressing(new java.io.SequenceInputStream(
                java.util.Collections.enumeration(parts))), dataStart);
            return null;
          } catch (RuntimeImageFormatException | RuntimeImageMismatchException e) {
            // Not the registry's fault: no retry (the client retries what it throws as a transport failure).
            throw new java.io.UncheckedIOException(e);
          }
        });
      }
    } catch (java.io.UncheckedIOException e) {
      if (load[0] != null) {
        end(load[0]);
      }
      throw e.getCause();
    } catch (IOException e) {
      failedWith = e.getMessage();
    }
    if (load[0] != null) {
      return finish(load[0], blob, false, failedWith, () -> {});
    }
    // The frames' request failed before the TOCs were awaited (or there are no frames): the index is bound now, and
    // what it reserves is given up as not arrived.
    Load bound = newLoad(manifest, tocs, blob);
    bound.requests = dataStart < blob.size() ? 2 : 1;
    return finish(bound, blob, false, failedWith, () -> bound.index(head, Optional.of(early.get().layout())));
  }

  /** Ends a load: whatever it reserved and did not bring is given up, and readers are told all is announced. */
  private void end(Load load) {
    delivery.announced();
    load.giveUpAll(RejectionKind.MISSING_FRAME, "did not arrive");
    load.scratch.close();
  }

  private Outcome outcome(Load load, String failure, String detail, boolean incremental) {
    Map<RejectionKind, Long> byKind = new EnumMap<>(RejectionKind.class);
    for (Rejection r : load.rejected) {
      byKind.merge(r.kind(), 1L, Long::sum);
    }
    if (failure == null && !load.rejected.isEmpty()) {
      Rejection first = load.rejected.get(0);
      failure = first.kind().key();
      detail = load.rejected.size() + " extent(s) rejected, first " + first.where() + ": " + first.reason();
    }
    return new Outcome(Optional.ofNullable(failure), detail, load.contents, load.delivered, load.deliveredBytes, load.reused,
        load.reusedBytes, byKind, incremental, load.requests, load.ignoredFrames,
        load.headroom);
  }

  /** Where the annotation says the index ends, if within the bound of an index read before the TOCs are in. */
  private static long earlyIndexEnd(Descriptor blob) {
    return indexEnd(blob, RuntimeImageFormat.HEADER_SIZE + Zstd.compressBound(EARLY_INDEX_BYTES));
  }

  /** Where the annotation says the index ends, if that lies within the blob and {@code bound}. */
  private static long indexEnd(Descriptor blob, long bound) {
    try {
      long end = Long.parseLong(blob.annotations().getOrDefault(RuntimeImageArtifact.INDEX_END, "0"));
      if (end > RuntimeImageFormat.HEADER_SIZE && end <= blob.size() && end <= bound) {
        return end;
      }
    } catch (NumberFormatException ignored) {
      // Read the header first, then the index.
    }
    return RuntimeImageFormat.HEADER_SIZE;
  }

  /**
   * A runtime image's index as read before the image's TOCs were in, to know where its frames end and whether the
   * node has any of the content it names. Nothing here is trusted: once the TOCs are in, the index is held to their
   * bounds (its stored and decompressed size) and bound to them, and every frame held here is decoded and verified as
   * if it had just arrived.
   *
   * @param nodeHasSome whether the index names content the page cache holds (then only what it lacks is fetched)
   */
  private record Early(Layout layout, List<List<int[]>> byFrame, boolean nodeHasSome) {
    /** The index in {@code head}, if it is one of at most {@link #EARLY_INDEX_BYTES}; else it waits for the TOCs. */
    static Optional<Early> of(byte[] head, PageCache cache) {
      Layout layout;
      List<List<int[]>> byFrame;
      try {
        layout = RuntimeImageFormat.readIndex(head, EARLY_INDEX_BYTES);
        byFrame = RuntimeImageDecoder.extentsByFrame(layout.index());
      } catch (RuntimeImageFormatException | RuntimeException e) {
        // Judged once the TOCs set its bounds.
        return Optional.empty();
      }
      for (LayerExtents l : layout.index().layers()) {
        for (Extent e : l.extents()) {
          if (cache.contains(e.digest())) {
            return Optional.of(new Early(layout, byFrame, true));
          }
        }
      }
      return Optional.of(new Early(layout, byFrame, false));
    }

    /**
     * The frames {@code in} (positioned at the first) brings until {@code ready}: whole frames that carry extents, in
     * order, at most {@link #EARLY_BYTES} in all.
     */
    List<byte[]> frames(InputStream in, java.util.function.BooleanSupplier ready) throws IOException {
      // One array per frame, as read: gathering them into one buffer allocated them two or three times over again
      // (a growing buffer and its copy: 21 of the 100 MB the manager allocated in python's start, JFR).
      List<byte[]> held = new ArrayList<>();
      long heldBytes = 0;
      long position = layout.dataStart();
      for (int f = 0; f < byFrame.size() && !ready.getAsBoolean(); f++) {
        Frame frame = layout.index().frames().get(f);
        if (byFrame.get(f).isEmpty() || frame.length() <= 0 || layout.frameStart(f) != position
            || heldBytes + frame.length() > EARLY_BYTES) {
          break;
        }
        byte[] bytes = in.readNBytes(frame.length());
        held.add(bytes);
        heldBytes += bytes.length;
        if (bytes.length != frame.length()) {
          break; // the response ended early: the load reads that again, and says so
        }
        position += frame.length();
      }
      return held;
    }

    /**
     * Whether the frames are worth requesting before the TOCs are in: the blob is as long as its index describes and
     * no frame holds more than the extents it carries, which the bounds would refuse once the TOCs are in (what needs
     * the TOCs, the index's size and the working set, is checked then).
     */
    boolean plausible(long blobSize, Limits limits) {
      if (blobSize != layout.blobSize()) {
        return false;
      }
      try {
        RuntimeImageBounds.checkFrames(layout.index(), byFrame, limits);
        return true;
      } catch (RuntimeImageLimitException e) {
        return false;
      }
    }

    /** Whether the index says it was built for {@code image} (its binding checks it again). */
    boolean builtFor(Digest image) {
      try {
        return layout.index().manifestDigest().equals(image);
      } catch (IllegalArgumentException e) {
        return false;
      }
    }

    static boolean ready(ImageManifest manifest, LayerIndexes tocs) {
      return manifest.layers().stream().allMatch(d -> tocs.ready(d.digest()));
    }
  }

  /** Whether the node holds any content of these layers (then only the missing frames are worth fetching). */
  private boolean holdsAny(Iterable<LayerIndex> layers) {
    for (LayerIndex l : layers) {
      if (l.anyStoredChunk(cache::contains)) {
        return true;
      }
    }
    return false;
  }

  /** One load's state; a retried request reads its range again and skips the frames already done. */
  private final class Load {
    final ImageManifest manifest;
    final Map<Digest, LayerIndex> layers;
    final RuntimeImageBounds bounds;
    final long blobSize;
    // Frames are decoded on the thread that reads the stream, one after another.
    final RuntimeImageDecoder.Scratch scratch = new RuntimeImageDecoder.Scratch();
    final Map<Digest, Reservation> reserved = new HashMap<>();
    final List<Rejection> rejected = new ArrayList<>();
    Layout layout;
    ImageBinding binding;
    List<List<int[]>> byFrame;
    boolean[] needed;
    boolean[] done;
    long delivered;
    long deliveredBytes;
    long reused;
    long reusedBytes;
    long contents;
    int requests;
    int ignoredFrames;
    String headroom = "";
    // The least share of a fetched frame its extents may serve: all of it, but for a borrowed runtime image.
    double frameUse = 1;

    Load(ImageManifest manifest, Map<Digest, LayerIndex> layers, RuntimeImageBounds bounds, long blobSize) {
      this.manifest = manifest;
      this.layers = layers;
      this.bounds = bounds;
      this.blobSize = blobSize;
    }

    /** Binds the index to the image and reserves every extent the node lacks. */
    void begin(Layout l) throws IOException {
      if (layout != null) {
        return;
      }
      if (l.index().verify() != trusted) {
        // Page digests from an index are trusted only where the node chose to trust them.
        throw new RuntimeImageMismatchException("index.verify: the runtime image is verified as "
            + l.index().verify().key() + ", this node trusts only " + trusted.key() + " ([runtime_image] verify)");
      }
      bounds.checkBlob(l, blobSize);
      try {
        binding = ImageBinding.bind(l.index(), manifest, layers);
      } catch (IllegalArgumentException e) {
        throw new RuntimeImageMismatchException("the runtime image has content of a layer whose TOC could not be"
            + " had: " + e.getMessage());
      }
      List<List<int[]>> extents = RuntimeImageDecoder.extentsByFrame(l.index());
      headroom = bounds.headroom(l.indexLength(), bounds.checkContent(l.index(), extents, frameUse));
      layout = l;
      byFrame = extents;
      ignoredFrames = (int) byFrame.stream().filter(List::isEmpty).count();
      needed = new boolean[byFrame.size()];
      done = new boolean[byFrame.size()];
      java.util.Set<Digest> seen = new java.util.HashSet<>();
      try {
        reserveMissing(seen);
      } finally {
        delivery.announced();
      }
    }

    private void reserveMissing(java.util.Set<Digest> seen) throws IOException {
      for (int f = 0; f < byFrame.size(); f++) {
        for (int[] le : byFrame.get(f)) {
          Digest d = binding.expected(le[0], le[1]);
          if (!seen.add(d)) {
            // The same content at another place: one copy serves both.
            needed[f] |= reserved.containsKey(d);
            if (reserved.containsKey(d) || cache.contains(d)) {
              plan(le, d);
            }
            continue;
          }
          contents++;
          Optional<Reservation> r = cache.reserve(d, progress);
          if (r.isPresent()) {
            reserved.put(d, r.get());
            needed[f] = true;
          } else if (cache.contains(d)) {
            reused++;
            reusedBytes += extent(le).length();
          } else {
            // Another reader fetches it right now: it needs nothing from us.
            continue;
          }
          plan(le, d);
        }
      }
    }

    /** Binds the index {@code head} holds (header and index, read before the TOCs were in). */
    void index(byte[] head) throws IOException {
      index(head, Optional.empty());
    }

    /**
     * The same, with the index as it was read from {@code head} before the TOCs were in (under a looser bound): held to
     * the TOCs' bounds on its stored and decompressed size, it is not parsed again.
     */
    void index(byte[] head, Optional<Layout> read) throws IOException {
      bounds.checkIndexLength(RuntimeImageFormat.indexLength(head));
      if (read.isPresent()) {
        RuntimeImageFormat.checkIndexSize(head, bounds.indexBytes());
        begin(read.get());
      } else {
        begin(RuntimeImageFormat.readIndex(head, bounds.indexBytes()));
      }
    }

    /**
     * The frames from a stream positioned at blob offset {@code at} (the first frame's start), as far as frames are
     * needed without a gap; the rest comes by range.
     */
    void framesFrom(InputStream in, long at) throws IOException {
      int to = 0;
      while (to < needed.length && needed[to]) {
        to++;
      }
      frames(in, at, 0, to);
    }

    /** Consecutive needed frames not done yet, as [from, to) frame ranges. */
    List<int[]> neededRuns() {
      List<int[]> runs = new ArrayList<>();
      if (layout == null) {
        return runs;
      }
      for (int f = 0; f < needed.length; f++) {
        if (!needed[f] || done[f]) {
          continue;
        }
        int start = f;
        while (f + 1 < needed.length && needed[f + 1] && !done[f + 1]) {
          f++;
        }
        runs.add(new int[] {start, f + 1});
      }
      return runs;
    }

    /**
     * The blob from its first byte, as far as frames are needed without a gap: the stream is cut at the first frame
     * not needed (it carries no extent, or only content the node has), the rest comes by range.
     */
    void whole(InputStream in) throws IOException {
      byte[] header = readExactly(in, RuntimeImageFormat.HEADER_SIZE, "the header");
      int indexLength = RuntimeImageFormat.indexLength(header);
      bounds.checkIndexLength(indexLength);
      byte[] head = new byte[RuntimeImageFormat.HEADER_SIZE + indexLength];
      System.arraycopy(header, 0, head, 0, header.length);
      byte[] index = readExactly(in, indexLength, "the index");
      System.arraycopy(index, 0, head, header.length, indexLength);
      begin(RuntimeImageFormat.readIndex(head, bounds.indexBytes()));
      framesFrom(in, layout.dataStart());
    }

    /** Frames {@code [from, to)} from a stream positioned at blob offset {@code at}. */
    void frames(InputStream in, long at, int from, int to) throws IOException {
      long position = at;
      for (int f = from; f < to; f++) {
        long start = layout.frameStart(f);
        Frame frame = layout.index().frames().get(f);
        in.skipNBytes(start - position); // EOFException if the blob ends before the frame
        position = start;
        if (done[f] || !needed[f]) {
          in.skipNBytes(frame.length());
        } else {
          byte[] compressed = scratch.compressed(frame.length());
          int n = in.readNBytes(compressed, 0, frame.length());
          if (n != frame.length()) {
            throw new EOFException("the runtime image ended inside frame " + f + " (" + n + " of " + frame.length()
                + " bytes)");
          }
          progress.advanced();
          List<Rejection> bad = new ArrayList<>();
          RuntimeImageDecoder.decodeFrame(layout, f, compressed, 0, scratch, binding, byFrame.get(f), this::accept, bad,
              "");
          for (Rejection r : bad) {
            rejected.add(r);
          }
          giveUp(f);
          done[f] = true;
        }
        position += frame.length();
      }
    }

    private void accept(int layer, int extent, VerifiedContent content) throws IOException {
      Reservation r = reserved.remove(content.digest());
      if (r == null) {
        return;
      }
      r.fill(content);
      LayerExtents l = layout.index().layers().get(layer);
      Extent e = l.extents().get(extent);
      delivered++;
      deliveredBytes += e.length();
      delivery.delivered(l.digest(), l.files().get(e.file()), e.fileOffset(), e.length(), content.digest());
    }

    /** Gives up what frame {@code f} was to bring and did not (its readers go to the lazy loader now). */
    private void giveUp(int f) {
      for (int[] le : byFrame.get(f)) {
        Reservation r = reserved.remove(binding.expected(le[0], le[1]));
        if (r != null) {
          r.abandon();
        }
      }
    }

    void giveUpAll(RejectionKind kind, String why) {
      if (layout == null) {
        return;
      }
      for (int f = 0; f < byFrame.size(); f++) {
        if (needed[f] && !done[f]) {
          done[f] = true;
          java.util.Set<Digest> counted = new java.util.HashSet<>();
          for (int[] le : byFrame.get(f)) {
            Digest d = binding.expected(le[0], le[1]);
            if (reserved.containsKey(d) && counted.add(d)) {
              LayerExtents l = layout.index().layers().get(le[0]);
              Extent e = l.extents().get(le[1]);
              rejected.add(new Rejection(kind, "layer " + l.digest().shortHex() + " " + l.files().get(e.file()) + " ["
                  + e.fileOffset() + ", " + e.fileEnd() + ")", "frame " + f + " " + why));
            }
          }
          giveUp(f);
        }
      }
    }

    private void plan(int[] le, Digest d) {
      LayerExtents l = layout.index().layers().get(le[0]);
      Extent e = l.extents().get(le[1]);
      delivery.planned(l.digest(), l.files().get(e.file()), e.fileOffset(), e.length(), d);
    }

    private Extent extent(int[] le) {
      return layout.index().layers().get(le[0]).extents().get(le[1]);
    }
  }

  private static byte[] readExactly(InputStream in, int n, String what) throws IOException {
    byte[] b = in.readNBytes(n);
    if (b.length != n) {
      throw new EOFException("the runtime image ended inside " + what + " (" + b.length + " of " + n + " bytes)");
    }
    return b;
  }

  /** Tells waiting readers that bytes keep arriving, not only whole frames. */
  private final class Progressing extends FilterInputStream {
    Progressing(InputStream in) {
      super(in);
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      int n = super.read(b, off, len);
      if (n > 0) {
        progress.advanced();
      }
      return n;
    }
  }
}
