package dev.flatpull.snapshotter.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.runtimeimage.RuntimeImageArtifact;
import dev.flatpull.runtimeimage.RuntimeImageDecoder;
import dev.flatpull.runtimeimage.RuntimeImageFormat;
import dev.flatpull.runtimeimage.RuntimeImageIndex;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.runtimeimage.RuntimeImagePublisher;
import dev.flatpull.trace.Trace;
import dev.flatpull.trace.TraceFile;
import java.io.FileNotFoundException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code flatpull runtime-image}: build, publish, list, show and remove runtime images (docs/runtime-images.md). */
@Command(name = "runtime-image", mixinStandardHelpOptions = true,
    description = "Runtime images: the pages a service version reads until ready, packed for one-transfer cold starts.",
    subcommands = {RuntimeImageCommand.Build.class, RuntimeImageCommand.Ls.class, RuntimeImageCommand.Show.class,
        RuntimeImageCommand.Rm.class, RuntimeImageCommand.Prune.class})
final class RuntimeImageCommand implements Runnable {
  /** Accepts the shared options between {@code flatpull} and the subcommand, too. */
  @Mixin GlobalOptions global;

  @Override
  public void run() {
    new picocli.CommandLine(this).usage(System.out);
  }

  static RuntimeImageSettings.Verification verification(String key) {
    return RuntimeImageSettings.Verification.of(key);
  }

  @Command(name = "build", mixinStandardHelpOptions = true,
      description = {"Build a runtime image of REF from a trace (flatpull record): the traced pages, as the image's",
          "chunks (default) or single pages (--verify runtime-image), read lazily and verified, deduplicated, in",
          "first-access order, zstd-compressed. Prints its size against the compressed image; writes it (--out)",
          "and/or pushes it next to the image as an OCI referrer (--push). With --from OLD_REF, derives it from an",
          "older version's runtime image (or --trace recorded on OLD_REF) without running REF: what REF has of",
          "the old trace's content, by chunk digest, is carried over; the rest is left to the lazy loader."})
  static final class Build implements Callable<Integer> {
    @Mixin GlobalOptions global;

    @Parameters(index = "0", paramLabel = "REF", description = "The image the trace was recorded on.")
    String reference;

    @Option(names = "--trace", paramLabel = "FILE",
        description = "The trace file (recorded on REF; with --from, recorded on OLD_REF).")
    Path trace;

    @Option(names = "--from", paramLabel = "OLD_REF",
        description = "Derive from this older version: its runtime image (--service KEY, else its newest), or the"
            + " --trace recorded on it.")
    String from;

    @Option(names = "--service", paramLabel = "KEY",
        description = "With --from: which of OLD_REF's runtime images (a service-version key or a prefix of it).")
    String service;

    @Option(names = "--min-overlap", paramLabel = "SHARE", defaultValue = "0",
        description = "With --from: refuse (exit 9, nothing written or pushed) when REF has less than this share of"
            + " the old trace's content: 0.8 or 80%%. Default: 0 (anything but nothing).")
    String minOverlap;

    @Option(names = "--push", description = "Push it as a referrer of the image manifest.")
    boolean push;

    @Option(names = "--out", paramLabel = "FILE", description = "Write the runtime-image blob to FILE.")
    Path out;

    @Option(names = "--verify", paramLabel = "MODE",
        description = "image (whole chunks checked against the image's TOCs) or runtime-image (pages checked against"
            + " the runtime image's own digests). Default: [runtime_image] verify, else image.")
    String verify;

    @Option(names = "--source", paramLabel = "REF",
        description = "The image the user started from, to compare sizes with (default: what 'flatpull convert'"
            + " recorded on the manifest, else REF itself).")
    String source;

    @Option(names = "--compare", description = "Also build the other verification mode and print its size.")
    boolean compare;

    @Override
    public Integer call() throws Exception {
      if (!push && out == null) {
        throw new IllegalArgumentException("nothing to do: give --push, --out FILE, or both");
      }
      if (trace == null && from == null) {
        throw new IllegalArgumentException("give --trace FILE, --from OLD_REF, or both");
      }
      if (from == null && (service != null || !minOverlap.equals("0"))) {
        throw new IllegalArgumentException("--service and --min-overlap go with --from");
      }
      double threshold = share("--min-overlap", minOverlap);
      FlatpullConfig config = global.load();
      RuntimeImageSettings settings = verify == null ? config.runtimeImage()
          : config.runtimeImage().withVerify(verification(verify));
      Optional<Trace> t = trace == null ? Optional.empty() : Optional.of(TraceFile.read(trace));
      ImageReference ref = ImageReference.parse(reference);
      try (RegistryClients clients = global.clients(config, FetchListener.NONE);
          RuntimeImageJob job = new RuntimeImageJob(config, clients, System.err)) {
        ImageManifest manifest = clients.client(ref).resolve(ref, global.platform()).manifest();
        if (from == null) {
          job.build(t.get(), ref, manifest, settings, Optional.ofNullable(out), push, Optional.ofNullable(source),
              compare);
          return 0;
        }
        ImageReference oldRef = ImageReference.parse(from);
        RuntimeImageJob.Derived derived = job.derive(oldRef, t, service, ref, manifest, global.platform(), threshold);
        job.build(derived.trace(), ref, manifest, settings, Optional.ofNullable(out), push,
            Optional.ofNullable(source), compare, Optional.of(derived.derivation()));
      }
      return 0;
    }
  }

  @Command(name = "ls", mixinStandardHelpOptions = true,
      description = "List the runtime images of REF: service key, command, probes, pages, size, age.")
  static final class Ls implements Callable<Integer> {
    @Mixin GlobalOptions global;

    @Parameters(index = "0", paramLabel = "REF")
    String reference;

    @Option(names = "--json", description = "Print JSON.")
    boolean json;

    @Override
    public Integer call() throws Exception {
      FlatpullConfig config = global.load();
      ImageReference ref = ImageReference.parse(reference);
      try (RegistryClients clients = global.clients(config, FetchListener.NONE);
          RuntimeImageJob job = new RuntimeImageJob(config, clients, System.err)) {
        ImageManifest manifest = clients.client(ref).resolve(ref, global.platform()).manifest();
        List<RuntimeImageArtifact> listed = job.publisher(ref).list(manifest.digest());
        if (json) {
          System.out.println(new ObjectMapper().writerWithDefaultPrettyPrinter().writeValueAsString(listed.stream()
              .map(r -> {
                Map<String, Object> m = new java.util.LinkedHashMap<>(Map.of("manifest", r.digest().toString(),
                    "serviceKey", r.serviceKey(), "command", r.command(), "probes", r.probes(), "pages", r.pages(),
                    "size", r.size(), "created", r.created().map(Instant::toString).orElse(""),
                    "traceRecorded", r.traceRecorded().map(Instant::toString).orElse("")));
                m.put("origin", r.derived().isPresent() ? "derived" : "recorded");
                r.derived().ifPresent(d -> {
                  m.put("derivedFrom", d.from());
                  m.put("overlap", d.overlap());
                });
                return m;
              }).toList()));
          return 0;
        }
        System.out.printf("%d runtime image%s of %s (%s)%n", listed.size(), listed.size() == 1 ? "" : "s", ref,
            manifest.digest());
        if (!listed.isEmpty()) {
          System.out.printf(Locale.ROOT, "%-19s %-19s %-13s %8s %10s %-9s %s%n", "service", "manifest", "origin",
              "pages", "size", "trace age", "command / probes");
        }
        for (RuntimeImageArtifact r : listed) {
          System.out.printf(Locale.ROOT, "%-19s %-19s %-13s %8d %10d %-9s %s / %s%n", shortKey(r.serviceKey()),
              r.digest().toString().substring(0, 19), origin(r), r.pages(), r.size(),
              r.traceRecorded().map(RuntimeImageCommand::age).orElse("?"),
              r.command().isEmpty() ? "(the image's)" : String.join(" ", r.command()), String.join(" ", r.probes()));
        }
        listed.stream().filter(r -> r.derived().isPresent()).forEach(r -> System.out.println(
            r.digest().toString().substring(0, 19) + " was derived from " + r.derived().get().from()));
      }
      return 0;
    }
  }

  /** "recorded", or "derived 93 %" with the share of the old trace's content the image has. */
  static String origin(RuntimeImageArtifact r) {
    return r.derived().map(d -> Double.isNaN(d.overlap()) ? "derived"
        : String.format(Locale.ROOT, "derived %.0f%%", 100 * d.overlap())).orElse("recorded");
  }

  /** A share given as {@code 0.8} or {@code 80%}, from 0 to 1. */
  static double share(String option, String text) {
    String t = text.strip();
    double v;
    try {
      v = t.endsWith("%") ? Double.parseDouble(t.substring(0, t.length() - 1).strip()) / 100 : Double.parseDouble(t);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(option + ": '" + text + "' is not a share (0.8 or 80%)");
    }
    if (!(v >= 0 && v <= 1)) {
      throw new IllegalArgumentException(option + ": '" + text + "' is not between 0 and 1 (0 % and 100 %)");
    }
    return v;
  }

  static String shortKey(String key) {
    return key.length() > 19 ? key.substring(0, 19) : key;
  }

  static String age(Instant then) {
    Duration d = Duration.between(then, Instant.now());
    if (d.toDays() > 0) {
      return d.toDays() + "d";
    }
    if (d.toHours() > 0) {
      return d.toHours() + "h";
    }
    return Math.max(0, d.toMinutes()) + "m";
  }

  /** Whether {@code r} is of the service version whose key starts with {@code key} (with or without "sha256:"). */
  static boolean ofService(RuntimeImageArtifact r, String key) {
    return r.serviceKey().startsWith(key) || r.serviceKey().startsWith("sha256:" + key);
  }

  /** The runtime image of {@code subject} that {@code service} names (a key prefix), else the newest. */
  static RuntimeImageArtifact select(List<RuntimeImageArtifact> listed, String service, String image)
      throws FileNotFoundException {
    List<RuntimeImageArtifact> matching = listed.stream().filter(r -> service == null || ofService(r, service))
        .toList();
    if (matching.isEmpty()) {
      throw new FileNotFoundException("no runtime image of " + image + (service == null ? "" : " for service " + service));
    }
    return matching.get(0);
  }

  @Command(name = "show", mixinStandardHelpOptions = true,
      description = {"Summarise a runtime image (a file, or the newest runtime image of REF, or the one --service",
          "names): service version, trace, content, per layer, top files by bytes. --verify checks every extent",
          "against the image (fetched lazily)."})
  static final class Show implements Callable<Integer> {
    @Mixin GlobalOptions global;

    @Parameters(index = "0", paramLabel = "REF|FILE")
    String target;

    @Option(names = "--service", paramLabel = "KEY", description = "Service-version key (or a prefix of it).")
    String service;

    @Option(names = "--json", description = "Print the index as JSON.")
    boolean json;

    @Option(names = "--top", defaultValue = "10", description = "How many files to list.")
    int top;

    @Option(names = "--verify", description = "Bind it to its image and verify every extent's content.")
    boolean verify;

    @Override
    public Integer call() throws Exception {
      FlatpullConfig config = global.load();
      try (RegistryClients clients = global.clients(config, FetchListener.NONE);
          RuntimeImageJob job = new RuntimeImageJob(config, clients, System.err)) {
        byte[] blob;
        String name;
        ImageReference image;
        Path file = Path.of(target);
        if (Files.isRegularFile(file)) {
          blob = Files.readAllBytes(file);
          name = target;
          image = null;
        } else {
          image = ImageReference.parse(target);
          ImageManifest manifest = clients.client(image).resolve(image, global.platform()).manifest();
          RuntimeImagePublisher publisher = job.publisher(image);
          RuntimeImageArtifact chosen = select(publisher.list(manifest.digest()), service, target);
          blob = publisher.fetch(chosen, manifest.digest(), config.root().resolve("tmp"));
          name = "of " + image + " (artifact " + chosen.digest() + ")";
        }
        RuntimeImageFormat.Layout layout = RuntimeImageFormat.read(blob);
        RuntimeImageIndex index = layout.index();
        if (json) {
          System.out.println(new ObjectMapper().writerWithDefaultPrettyPrinter()
              .writeValueAsString(RuntimeImageFormat.toJson(index)));
        } else {
          print(name, blob.length, index, top);
        }
        if (verify) {
          ImageReference ref = (image != null ? image : ImageReference.parse(index.service().image()))
              .withDigest(index.manifestDigest());
          RegistryClient client = clients.client(ref);
          ImageManifest manifest = client.resolve(ref, global.platform()).manifest();
          RuntimeImageDecoder.Result r = job.verify(layout, blob, ref, manifest);
          System.out.printf(Locale.ROOT, "verified     %d extents (%.1f MiB) equal the image's bytes; %d rejected%n",
              r.accepted(), r.acceptedBytes() / 1048576.0, r.rejected().size());
          r.rejected().stream().limit(10).forEach(x -> System.out.println("  rejected " + x.where() + ": " + x.reason()));
          if (!r.rejected().isEmpty()) {
            throw new dev.flatpull.core.DigestMismatchException(r.rejected().size() + " extents of " + name,
                index.manifestDigest(), index.manifestDigest());
          }
        }
      }
      return 0;
    }

    static void print(String name, long size, RuntimeImageIndex index, int top) {
      var s = index.service();
      System.out.println("runtime image " + name);
      System.out.println("service      " + s.key());
      System.out.println("image        " + s.image() + " (" + s.manifestDigest() + ", " + s.platform() + ")");
      System.out.println("command      " + (s.command().isEmpty() ? "(the image's)" : String.join(" ", s.command())));
      System.out.println("probes       " + String.join(" ", s.probes()));
      System.out.println("verify       " + index.verify().key() + (index.verify()
          == RuntimeImageSettings.Verification.IMAGE ? " (whole chunks, checked against the image's TOCs)"
          : " (pages, checked against this runtime image's own digests: trusts whoever pushed it)"));
      System.out.println("built        " + index.createdAt() + " by flatpull " + index.flatpullVersion());
      System.out.printf(Locale.ROOT, "trace        %d pages (%.1f MiB), recorded %s, ready after %s ms%n",
          index.trace().pages(), index.trace().pages() * 4096 / 1048576.0, index.trace().recordedAt(),
          index.trace().readyMillis());
      System.out.printf(Locale.ROOT, "content      %d extents serving %.1f MiB; %.1f MiB stored once in %d frames;"
              + " %d bytes compressed (blob)%n", index.extentCount(), index.servedBytes() / 1048576.0,
          index.contentBytes() / 1048576.0, index.frames().size(), size);
      Map<String, Long> byFile = new HashMap<>();
      for (LayerExtents l : index.layers()) {
        long bytes = l.extents().stream().mapToLong(Extent::length).sum();
        System.out.printf(Locale.ROOT, "layer        %s: %d extents, %.1f MiB, %d files%n", l.digest(),
            l.extents().size(), bytes / 1048576.0, l.files().size());
        for (Extent e : l.extents()) {
          byFile.merge(l.files().get(e.file()), (long) e.length(), Long::sum);
        }
      }
      System.out.println("top files by bytes:");
      List<Map.Entry<String, Long>> files = new ArrayList<>(byFile.entrySet());
      files.sort(Map.Entry.<String, Long>comparingByValue(Comparator.reverseOrder()));
      files.stream().limit(top).forEach(e -> System.out.printf("  %10d  %s%n", e.getValue(), e.getKey()));
    }
  }

  @Command(name = "rm", mixinStandardHelpOptions = true,
      description = "Remove runtime images of REF from its referrers: the one --service names, or --all.")
  static final class Rm implements Callable<Integer> {
    @Mixin GlobalOptions global;

    @Parameters(index = "0", paramLabel = "REF")
    String reference;

    @Option(names = "--service", paramLabel = "KEY", description = "Service-version key (or a prefix of it).")
    String service;

    @Option(names = "--all", description = "Every runtime image of REF.")
    boolean all;

    @Override
    public Integer call() throws Exception {
      if (all == (service != null)) {
        throw new IllegalArgumentException("give exactly one of --service KEY and --all");
      }
      return RuntimeImageCommand.remove(global, reference, r -> all || ofService(r, service));
    }
  }

  @Command(name = "prune", mixinStandardHelpOptions = true,
      description = "Remove the runtime images of REF whose trace is older than --older-than (e.g. 30d, 12h).")
  static final class Prune implements Callable<Integer> {
    @Mixin GlobalOptions global;

    @Parameters(index = "0", paramLabel = "REF")
    String reference;

    @Option(names = "--older-than", required = true, paramLabel = "AGE", description = "Trace age: 90m, 12h, 30d.")
    String olderThan;

    @Override
    public Integer call() throws Exception {
      Duration age = olderThan.endsWith("d")
          ? Duration.ofDays(Long.parseLong(olderThan.substring(0, olderThan.length() - 1)))
          : Durations.parse("--older-than", olderThan);
      Instant cutoff = Instant.now().minus(age);
      return RuntimeImageCommand.remove(global, reference,
          r -> r.traceRecorded().map(t -> t.isBefore(cutoff)).orElse(false));
    }
  }

  private static int remove(GlobalOptions global, String reference,
      java.util.function.Predicate<RuntimeImageArtifact> which) throws Exception {
    FlatpullConfig config = global.load();
    ImageReference ref = ImageReference.parse(reference);
    try (RegistryClients clients = global.clients(config, FetchListener.NONE);
        RuntimeImageJob job = new RuntimeImageJob(config, clients, System.err)) {
      Digest manifest = clients.client(ref).resolve(ref, global.platform()).manifest().digest();
      List<RuntimeImageArtifact> gone = job.publisher(ref).remove(manifest, which);
      for (RuntimeImageArtifact r : gone) {
        System.out.println("removed " + r.digest() + " (service " + shortKey(r.serviceKey()) + ")");
      }
      System.err.println(gone.size() + " runtime image" + (gone.size() == 1 ? "" : "s") + " removed");
    }
    return 0;
  }
}
