package dev.flatpull.manager;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.reference.ImageReference;
import java.io.IOException;
import java.io.InterruptedIOException;
import dev.flatpull.fetcher.layer.LayerEntry;
import dev.flatpull.fuse.PageSource;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One image being started on this node, from its first remote Prepare: every lazy layer's TOC is opened at once, in
 * parallel (containerd prepares one layer after another, so later Prepares find theirs ready), and its runtime image
 * is looked up and streamed meanwhile. {@link #runtimeImage} completes when that is over: with whether a runtime image
 * brought content, so that prefetching of the image's layers waits for it.
 */
final class ImageSession implements dev.flatpull.runtimeimage.RuntimeImageStream.LayerIndexes {
  final ImageReference reference;
  final ImageManifest manifest;
  final long startedNanos;
  /** True when a runtime image brought (or found) content; false when none was used. Never fails. */
  final CompletableFuture<Boolean> runtimeImage = new CompletableFuture<>();
  /**
   * True once the lookup chose a runtime image for the image, false when it found none (or failed): until then reads
   * do not wait for one, so a slow lookup costs a start nothing.
   */
  final CompletableFuture<Boolean> found = new CompletableFuture<>();
  /** Completes once the runtime image's content is reserved in the cache, or none will be. */
  final CompletableFuture<Void> announced = new CompletableFuture<>();
  /** Page-mode content by place: layer digest, content entry name and page number to the page's digest. */
  private final Map<String, Digest> pages = new ConcurrentHashMap<>();
  /** Set when a read waited a whole stall for {@link #announced}: reads stop waiting for it. */
  volatile boolean announcementLate;
  /** Arrived runtime-image content of layers not mounted yet, pushed into the kernel when they are. */
  final Map<Digest, java.util.Queue<Runnable>> unlanded = new ConcurrentHashMap<>();
  /** Per mount point and runtime-image path, the path its content is landed under in the kernel, if any. */
  final Map<String, java.util.Optional<String>> landable = new ConcurrentHashMap<>();
  private final Map<Digest, CompletableFuture<LazyLayer>> layers = new ConcurrentHashMap<>();
  private final java.util.Set<Digest> aheadOfManifest = ConcurrentHashMap.newKeySet();
  private final AtomicBoolean firstByte = new AtomicBoolean();
  private final LayerOpener opener;
  private final Executor executor;
  private final ExpectedLayers expected;

  /**
   * @param executor where the layers' TOCs are opened
   * @param expected layers whose TOCs were opened with their Prepare, before the manifest: taken where it agrees
   */
  ImageSession(ImageReference reference, ImageManifest manifest, long startedNanos, LayerOpener opener,
      Executor executor, ExpectedLayers expected) {
    this.reference = reference;
    this.manifest = manifest;
    this.startedNanos = startedNanos;
    this.opener = opener;
    this.executor = executor;
    this.expected = expected;
  }

  /** Starts opening the TOC of every lazy layer of the image. */
  void openLayers() {
    for (Descriptor d : manifest.layers()) {
      boolean lazy;
      try {
        lazy = LayerFormat.of(d) != LayerFormat.PLAIN;
      } catch (IOException unsupported) {
        lazy = false;
      }
      if (lazy) {
        opening(d);
      }
    }
  }

  private CompletableFuture<LazyLayer> opening(Descriptor d) {
    // An expected opening that failed (a reset, a label that lied) is not the layer's last word: it is opened again.
    return layers.computeIfAbsent(d.digest(), k -> expected.claim(d)
        .map(early -> {
          aheadOfManifest.add(k);
          return early.exceptionallyCompose(failed -> open(opener, d, executor));
        })
        .orElseGet(() -> open(opener, d, executor)));
  }

  /** Whether the TOC of layer {@code digest} was asked for with its Prepare, before the manifest was read. */
  boolean openedAheadOfManifest(Digest digest) {
    return aheadOfManifest.contains(digest);
  }

  /** Whether this session opens (or opened) the layer {@code digest}. */
  boolean opens(Digest digest) {
    return layers.containsKey(digest);
  }

  /** Opens {@code d} with {@code opener} on {@code executor}. */
  static CompletableFuture<LazyLayer> open(LayerOpener opener, Descriptor d, Executor executor) {
    return CompletableFuture.supplyAsync(() -> {
      try {
        return opener.open(d);
      } catch (IOException e) {
        throw new java.util.concurrent.CompletionException(e);
      }
    }, executor);
  }

  /** The opened layer {@code d} (of this image), waiting for its TOC if it is still on its way. */
  LazyLayer layer(Descriptor d) throws IOException {
    return await(d.digest(), opening(d));
  }

  /** The opened layer of this image whose digest is {@code digest}. */
  LazyLayer layer(Digest digest) throws IOException {
    Descriptor d = manifest.layers().stream().filter(l -> l.digest().equals(digest)).findFirst()
        .orElseThrow(() -> new IOException("image " + manifest.digest() + " has no layer " + digest));
    return layer(d);
  }

  private LazyLayer await(Digest digest, CompletableFuture<LazyLayer> f) throws IOException {
    try {
      return f.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted opening layer " + digest);
    } catch (ExecutionException e) {
      // A failed open is not kept: the next Prepare of this layer tries again.
      layers.remove(digest, f);
      Throwable cause = e.getCause() instanceof java.util.concurrent.CompletionException c ? c.getCause() : e.getCause();
      if (cause instanceof IOException io) {
        throw io;
      }
      throw new IOException("opening layer " + digest + ": " + cause, cause);
    }
  }

  /** The verified TOC of a lazy layer of this image; a layer without one (plain) is refused, never downloaded. */
  LayerIndex index(Digest digest) throws IOException {
    Descriptor d = manifest.layers().stream().filter(l -> l.digest().equals(digest)).findFirst()
        .orElseThrow(() -> new IOException("image " + manifest.digest() + " has no layer " + digest));
    if (LayerFormat.of(d) == LayerFormat.PLAIN) {
      throw new IOException("layer " + digest + " has no table of contents");
    }
    return layer(d).index();
  }

  @Override
  public LayerIndex await(Digest layer) throws IOException {
    return index(layer);
  }

  /** Whether the TOC of {@code layer} is in (or failed, or the layer has none): {@link #index} answers at once. */
  @Override
  public boolean ready(Digest layer) {
    CompletableFuture<LazyLayer> f = layers.get(layer);
    return f == null || f.isDone();
  }

  /**
   * Records that page-mode content {@code content} is {@code path} at {@code offset} (a page) of {@code layer}, keyed
   * by the file's content entry (a hard link's target), as the read path looks it up.
   */
  void pagePlanned(Digest layer, String path, long offset, Digest content) throws IOException {
    LayerIndex index = index(layer);
    Optional<LayerEntry> e = index.entry(path).map(index::contentOf);
    if (e.isPresent()) {
      pages.put(pageKey(layer, e.get().name(), offset / PageSource.PAGE_SIZE), content);
    }
  }

  /** The page-mode content of {@code layer}'s files, for its read path. */
  PageSource pagesOf(Digest layer) {
    return (file, page) -> Optional.ofNullable(pages.get(pageKey(layer, file, page)));
  }

  private static String pageKey(Digest layer, String file, long page) {
    return layer + "\0" + file + "\0" + page;
  }

  /** True the first time only: the image's first byte served. */
  boolean firstByteServed() {
    // A plain read first: this runs for every chunk served, and is true only once.
    return !firstByte.get() && firstByte.compareAndSet(false, true);
  }
}
