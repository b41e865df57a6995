package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.convert.ImageConverter;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.Referrers;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.runtimeimage.ImageBinding;
import dev.flatpull.runtimeimage.RuntimeImageArtifact;
import dev.flatpull.runtimeimage.RuntimeImageBuilder;
import dev.flatpull.runtimeimage.RuntimeImageDecoder;
import dev.flatpull.runtimeimage.RuntimeImageFormat;
import dev.flatpull.runtimeimage.RuntimeImageMismatchException;
import dev.flatpull.runtimeimage.RuntimeImageOverlapException;
import dev.flatpull.runtimeimage.RuntimeImagePublisher;
import dev.flatpull.runtimeimage.TraceRebase;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * What {@code runtime-image build} and {@code record --push-runtime-image} share: open an image's layers (TOCs in
 * parallel), build a runtime image from a trace, print its figures, write it, push it; and binding a runtime image to
 * its image for {@code show --verify}. One registry session ({@link RegistryClients}) per job; close it.
 */
final class RuntimeImageJob implements AutoCloseable {
  private final FlatpullConfig config;
  private final RegistryClients clients;
  // Steps as lines; the chunks' fetch as bytes, rate and time left, rewritten in place on a terminal.
  private final ProgressDisplay progress;
  private final ExecutorService pool = Executors.newFixedThreadPool(Runtime.getRuntime().availableProcessors());

  RuntimeImageJob(FlatpullConfig config, RegistryClients clients, PrintStream progress) {
    this.config = config;
    this.clients = clients;
    this.progress = new ProgressDisplay(progress, progress == System.err && System.console() != null,
        System::nanoTime);
  }

  RegistryClient client(ImageReference ref) {
    return clients.client(ref);
  }

  RuntimeImagePublisher publisher(ImageReference ref) {
    RegistryClient client = clients.client(ref);
    return RuntimeImagePublisher.of(client);
  }

  /** The lazily readable layers of {@code manifest} among {@code wanted}, TOCs fetched in parallel. */
  Map<Digest, LazyLayer> open(RegistryClient client, ImageManifest manifest, java.util.Set<Digest> wanted)
      throws IOException {
    LayerOpener opener = new LayerOpener(client, config, config.root().resolve("tmp"), pool);
    List<Descriptor> lazy = manifest.layers().stream().filter(d -> wanted.contains(d.digest())).filter(d -> {
      try {
        return LayerFormat.of(d) != LayerFormat.PLAIN;
      } catch (IOException e) {
        return false;
      }
    }).toList();
    List<Future<LazyLayer>> futures = new ArrayList<>();
    for (Descriptor d : lazy) {
      futures.add(pool.submit(() -> opener.open(d)));
    }
    Map<Digest, LazyLayer> out = new LinkedHashMap<>();
    for (int i = 0; i < lazy.size(); i++) {
      LazyLayer layer = join(futures.get(i));
      out.put(lazy.get(i).digest(), layer);
      progress.step(String.format(Locale.ROOT, "layer %d/%d %s of %s: TOC read and verified, %d entries, %d chunks",
          i + 1, lazy.size(), lazy.get(i).digest().shortHex(), client.repository(), layer.index().entries().size(),
          layer.index().chunkCount()));
    }
    return out;
  }

  private static <T> T join(Future<T> f) throws IOException {
    try {
      return f.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("interrupted opening layers");
    } catch (ExecutionException e) {
      if (e.getCause() instanceof IOException io) {
        throw io;
      }
      throw new IOException(e.getCause());
    }
  }

  /** What a build is compared with. */
  record Baseline(long compressedBytes, String what) {}

  /**
   * The compressed size of the image the user started from: {@code source} when given, else what {@code flatpull
   * convert} recorded on the manifest, else the image itself.
   */
  Baseline baseline(ImageManifest manifest, Optional<String> source) throws IOException {
    if (source.isPresent()) {
      ImageReference ref = ImageReference.parse(source.get());
      ImageManifest m = clients.client(ref).resolve(ref, dev.flatpull.fetcher.oci.Platform.current()).manifest();
      return new Baseline(m.layers().stream().mapToLong(Descriptor::size).sum(), source.get());
    }
    String converted = manifest.annotations().get(ImageConverter.SOURCE_LAYERS_SIZE);
    if (converted != null) {
      return new Baseline(Long.parseLong(converted), "the image it was converted from ("
          + manifest.annotations().getOrDefault(ImageConverter.SOURCE_MANIFEST, "?").substring(0, 19) + ")");
    }
    return new Baseline(manifest.layers().stream().mapToLong(Descriptor::size).sum(), "this image");
  }

  /**
   * The trace of the older version {@code oldRef} ({@code recorded}, a trace file recorded on it, else the trace of
   * its runtime image that {@code service} names or its newest) carried over to {@code manifest} by content
   * ({@link TraceRebase}), with what it kept printed.
   *
   * @throws RuntimeImageOverlapException when the new image has less of it than {@code minOverlap}
   */
  Derived derive(ImageReference oldRef, Optional<Trace> recorded, String service, ImageReference ref,
      ImageManifest manifest, dev.flatpull.fetcher.oci.Platform platform, double minOverlap) throws IOException {
    long started = System.nanoTime();
    RegistryClient oldClient = clients.client(oldRef);
    ImageManifest oldManifest = oldClient.resolve(oldRef, platform).manifest();
    Trace old;
    if (recorded.isPresent()) {
      old = recorded.get();
      if (!old.service().manifestDigest().equals(oldManifest.digest().toString())) {
        throw new RuntimeImageMismatchException("trace.service.manifestDigest: the trace was recorded on manifest "
            + old.service().manifestDigest() + ", but " + oldRef + " is " + oldManifest.digest());
      }
      progress.step("from the trace recorded on " + oldRef + " (" + old.pages() + " pages)");
    } else {
      RuntimeImagePublisher publisher = publisher(oldRef);
      RuntimeImageArtifact chosen = RuntimeImageCommand.select(publisher.list(oldManifest.digest()), service,
          oldRef.toString());
      byte[] blob = publisher.fetch(chosen, oldManifest.digest(), config.root().resolve("tmp"));
      old = TraceRebase.traceOf(RuntimeImageFormat.read(blob).index());
      progress.step("from the runtime image " + chosen.digest() + " of " + oldRef + " (" + old.pages()
          + " pages, trace recorded " + old.recordedAt() + ")");
    }
    java.util.Set<Digest> oldTraced = old.layers().stream().map(l -> Digest.parse(l.layerDigest()))
        .collect(java.util.stream.Collectors.toSet());
    Future<Map<Digest, LazyLayer>> oldLayers = pool.submit(() -> open(oldClient, oldManifest, oldTraced));
    Map<Digest, LazyLayer> newLayers = open(clients.client(ref), manifest, manifest.layers().stream()
        .map(Descriptor::digest).collect(java.util.stream.Collectors.toSet()));
    Map<Digest, LayerIndex> oldIndexes = new LinkedHashMap<>();
    join(oldLayers).forEach((d, l) -> oldIndexes.put(d, l.index()));
    ServiceVersion s = old.service();
    ServiceVersion target = new ServiceVersion(ref.toString(), manifest.digest().toString(), s.platform(), s.command(),
        s.environment(), s.workingDirectory(), s.probes());
    TraceRebase.Rebased rebased = TraceRebase.rebase(old, oldIndexes, target,
        newLayers.values().stream().map(LazyLayer::index).toList());
    progress.step(String.format(Locale.ROOT,
        "carried over %.1f of %.1f MiB traced (%.1f %%; bytes: %d at the same path, %d"
            + " moved; %d changed, taken from the new file at the same path; %d gone, left to the lazy loader) in"
            + " %d ms",
        (rebased.samePathBytes() + rebased.movedBytes()) / 1048576.0, rebased.tracedBytes() / 1048576.0,
        100 * rebased.overlap(), rebased.samePathBytes(), rebased.movedBytes(), rebased.changedBytes(),
        rebased.droppedBytes(), (System.nanoTime() - started) / 1_000_000));
    if (rebased.overlap() < minOverlap || rebased.overlap() == 0) {
      throw new RuntimeImageOverlapException(String.format(Locale.ROOT, "%s has %.1f %% of the content traced on %s,"
          + " below the %.1f %% asked (--min-overlap): nothing derived; record this version instead", ref,
          100 * rebased.overlap(), oldRef, 100 * minOverlap));
    }
    return new Derived(rebased.trace(), new RuntimeImageArtifact.Derivation(
        oldRef.withDigest(oldManifest.digest()).toString(), rebased.overlap()));
  }

  /** A trace carried over to a newer version, and what its runtime image's annotations say of where it came from. */
  record Derived(Trace trace, RuntimeImageArtifact.Derivation derivation) {}

  /** Builds, reports, and optionally writes and pushes. */
  RuntimeImageBuilder.Built build(Trace trace, ImageReference ref, ImageManifest manifest, RuntimeImageSettings settings,
      Optional<Path> out, boolean push, Optional<String> source, boolean compare)
      throws IOException, InterruptedException {
    return build(trace, ref, manifest, settings, out, push, source, compare, Optional.empty());
  }

  /** The same for a runtime image {@code derived} from an older version's, which its annotations then say. */
  RuntimeImageBuilder.Built build(Trace trace, ImageReference ref, ImageManifest manifest, RuntimeImageSettings settings,
      Optional<Path> out, boolean push, Optional<String> source, boolean compare,
      Optional<RuntimeImageArtifact.Derivation> derived) throws IOException, InterruptedException {
    RegistryClient client = clients.client(ref);
    java.util.Set<String> traced = trace.layers().stream().map(l -> l.layerDigest())
        .collect(java.util.stream.Collectors.toSet());
    Map<Digest, LazyLayer> layers = open(client, manifest, manifest.layers().stream().map(Descriptor::digest)
        .filter(d -> traced.contains(d.toString())).collect(java.util.stream.Collectors.toSet()));
    RuntimeImageBuilder.LayerSource sourceOf = d -> layers.get(d.digest());
    RuntimeImageBuilder.Built built = new RuntimeImageBuilder(settings, InstantSource.system(),
        FlatpullCommand.VERSION, progress).build(trace, manifest, sourceOf);
    Baseline base = baseline(manifest, source);
    RuntimeImageBuilder.Statistics s = built.statistics();
    progress.step(String.format(Locale.ROOT,
        "runtime image (%s mode): %d traced pages (%.1f MiB) -> %d extents, %d unique,"
            + " %.1f MiB of content in %d frames; %.2f MiB compressed, %.2f %% of the %.1f MiB compressed image (%s)",
        settings.verify().key(), s.tracedPages(), s.tracedPages() * 4096 / 1048576.0, s.extents(), s.uniqueExtents(),
        s.contentBytes() / 1048576.0, built.index().frames().size(), s.blobBytes() / 1048576.0,
        100.0 * s.blobBytes() / base.compressedBytes(), base.compressedBytes() / 1048576.0, base.what()));
    if (compare) {
      RuntimeImageSettings.Verification other = settings.verify() == RuntimeImageSettings.Verification.IMAGE
          ? RuntimeImageSettings.Verification.RUNTIME_IMAGE : RuntimeImageSettings.Verification.IMAGE;
      RuntimeImageBuilder.Built alt = new RuntimeImageBuilder(settings.withVerify(other), InstantSource.system(),
          FlatpullCommand.VERSION, line -> {}).build(trace, manifest, sourceOf);
      progress.step(String.format(Locale.ROOT,
          "the %s mode would be: %.1f MiB of content, %.2f MiB compressed, %.2f %% of the"
              + " compressed image", other.key(), alt.statistics().contentBytes() / 1048576.0,
          alt.statistics().blobBytes() / 1048576.0, 100.0 * alt.statistics().blobBytes() / base.compressedBytes()));
    }
    if (out.isPresent()) {
      Path file = out.get().toAbsolutePath();
      Path tmp = Files.createTempFile(file.getParent(), ".runtime-image", ".tmp");
      try {
        Files.write(tmp, built.blob());
        Files.move(tmp, file, java.nio.file.StandardCopyOption.ATOMIC_MOVE,
            java.nio.file.StandardCopyOption.REPLACE_EXISTING);
      } finally {
        Files.deleteIfExists(tmp);
      }
      progress.step("wrote " + out.get());
    }
    if (push) {
      Descriptor subject = new Descriptor(manifest.mediaType(), manifest.digest(), manifest.raw().length, Map.of());
      RuntimeImagePublisher.Published p = publisher(ref).push(built.index(), built.blob(), subject, derived);
      progress.step("pushed runtime image " + p.manifest().digest() + " as a referrer of " + manifest.digest()
          + (p.source() == Referrers.Source.API ? " (referrers API)" : " (referrers tag schema, "
              + Referrers.tagOf(manifest.digest()) + ")")
          + (p.replaced().isEmpty() ? "" : "; replaced " + p.replaced().size() + " of the same service version"));
    }
    return built;
  }

  /** Binds {@code layout} to its image and decodes all of {@code blob}, verifying every extent. */
  RuntimeImageDecoder.Result verify(RuntimeImageFormat.Layout layout, byte[] blob, ImageReference ref,
      ImageManifest manifest) throws IOException {
    Map<Digest, LayerIndex> indexes = new LinkedHashMap<>();
    open(clients.client(ref), manifest, layout.index().layers().stream().map(l -> l.digest())
        .collect(java.util.stream.Collectors.toSet())).forEach((d, l) -> indexes.put(d, l.index()));
    ImageBinding binding = ImageBinding.bind(layout.index(), manifest, indexes);
    return RuntimeImageDecoder.decode(layout, blob, binding, (l, e, c) -> {});
  }

  @Override
  public void close() {
    pool.shutdownNow();
  }
}
