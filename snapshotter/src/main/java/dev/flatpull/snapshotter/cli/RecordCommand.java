package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.snapshotter.record.ServiceRecorder;
import dev.flatpull.manager.client.FuseManagerClient;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.Trace;
import dev.flatpull.trace.TraceFile;
import dev.flatpull.trace.probe.Probe;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code flatpull record}: the pages a service version reads from its image until it is ready. */
@Command(name = "record", mixinStandardHelpOptions = true,
    description = {"Cold-start REF through containerd with flatpull recording every read of the image's layers,",
        "until every --probe has succeeded, then stop the container and write the trace (docs/traces.md).",
        "Needs 'flatpull serve' running (its FUSE manager records) with containerd using it as snapshotter",
        "'flatpull', ctr-remote (package stargz-snapshotter), and root. The kernel's caches are dropped before each",
        "start and its readahead narrowed on the layers while recording. Record on a quiet host: reads of other",
        "containers on the same layers are recorded too.",
        "Probes: http://HOST:PORT/PATH (2xx), tcp://HOST:PORT (connects), exit (the command exits 0),",
        "exec:COMMAND (exits 0 on the host), log:REGEX (a line of the container's output matches)."})
final class RecordCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Parameters(index = "0", paramLabel = "REF", description = "Image reference (pulled remotely by containerd).")
  String reference;

  @Parameters(index = "1..*", paramLabel = "COMMAND", arity = "0..*",
      description = "Command and arguments, after --; default: the image's.")
  List<String> command = new ArrayList<>();

  @Option(names = "--probe", required = true, paramLabel = "SPEC", description = "Readiness probe; repeatable (all must pass).")
  List<String> probes;

  @Option(names = "--runs", defaultValue = "1", description = "Cold starts to merge (union, with per-page frequency).")
  int runs;

  @Option(names = "--out", paramLabel = "FILE", description = "Trace file. Default: trace-KEY.fptrace (KEY: the service key's first 12 hex digits).")
  Path out;

  @Option(names = "--probe-interval", defaultValue = "100ms", paramLabel = "DURATION", description = "Between probe attempts.")
  String interval;

  @Option(names = "--probe-timeout", defaultValue = "120s", paramLabel = "DURATION", description = "Longest wait for ready; then no trace is written.")
  String timeout;

  @Option(names = "--containerd-address", defaultValue = "/run/containerd/containerd.sock", paramLabel = "SOCKET")
  Path containerd;

  @Option(names = "--namespace", defaultValue = "default")
  String namespace;

  @Option(names = "--snapshotter", defaultValue = "flatpull", description = "containerd's name for flatpull.")
  String snapshotter;

  @Option(names = "--no-host-network", description = "Give the container its own network namespace (default: the host's, so that probes reach it on 127.0.0.1).")
  boolean noHostNetwork;

  @Option(names = "--env", paramLabel = "NAME=VALUE", description = "Extra environment; repeatable. The trace and"
      + " its runtime images record the names only, never the values.")
  List<String> env = new ArrayList<>();

  @Option(names = "--cwd", paramLabel = "DIR", description = "Working directory in the container.")
  String cwd = "";

  @Option(names = "--push-runtime-image",
      description = "Then build the runtime image of the trace and push it next to the image (runtime-image build --push).")
  boolean pushRuntimeImage;

  @Option(names = "--verify", paramLabel = "MODE",
      description = "With --push-runtime-image: image (default) or runtime-image (see runtime-image build).")
  String verify;

  @Override
  public Integer call() throws Exception {
    if (runs < 1) {
      throw new IllegalArgumentException("--runs must be at least 1");
    }
    List<Probe> parsed = probes.stream().map(Probe::parse).toList();
    FlatpullConfig config = global.load();
    ImageReference ref = ImageReference.parse(reference);
    String manifestDigest;
    Set<String> layers;
    ImageManifest manifest;
    try (RegistryClients clients = global.clients(config, FetchListener.NONE)) {
      RegistryClient client = clients.client(ref);
      var resolved = client.resolve(ref, global.platform());
      manifest = resolved.manifest();
      manifestDigest = resolved.manifest().digest().toString();
      layers = resolved.manifest().layers().stream().map(Descriptor::digest).map(Object::toString)
          .collect(Collectors.toSet());
    }
    // The container gets the values; the trace, and every runtime image built from it, only the names.
    ServiceVersion service = new ServiceVersion(reference, manifestDigest, global.platform().toString(), command,
        ServiceVersion.names(env), cwd, probes);
    Path file = out != null ? out : Path.of("trace-" + service.key().substring(7, 19) + ".fptrace");
    try (FuseManagerClient manager = new FuseManagerClient(config.snapshotter().fuseManagerSocket(), List.of(),
        config.root().resolve("fuse-manager.log"))) {
      // flatpull serve starts its manager as it begins to serve; this fails clearly when neither runs.
      manager.awaitServing(java.time.Duration.ofSeconds(30));
      ServiceRecorder.Result r = new ServiceRecorder(manager, ProgressDisplay.onStandardError()).record(
          new ServiceRecorder.Plan(
          reference, layers, parsed, Durations.parse("--probe-interval", interval),
          Durations.parse("--probe-timeout", timeout), runs, containerd, namespace, snapshotter, config.registry().plainHttp(),
          !noHostNetwork, env, cwd, command));
      Trace trace = new Trace(service, FlatpullCommand.VERSION, Instant.now(), r.readyMillis(), r.layers());
      TraceFile.write(trace, file);
      System.err.printf("wrote %s: service %s, %d pages (%.1f MiB) over %d layer%s%n", file,
          service.key().substring(0, 19), trace.pages(), trace.bytes() / 1048576.0, trace.layers().size(),
          trace.layers().size() == 1 ? "" : "s");
      System.out.println(file);
    }
    if (pushRuntimeImage) {
      RuntimeImageSettings settings = verify == null ? config.runtimeImage()
          : config.runtimeImage().withVerify(RuntimeImageCommand.verification(verify));
      Trace trace = TraceFile.read(file);
      try (RegistryClients clients = global.clients(config, FetchListener.NONE);
          RuntimeImageJob job = new RuntimeImageJob(config, clients, System.err)) {
        job.build(trace, ref, manifest, settings, java.util.Optional.empty(), true, java.util.Optional.empty(), false);
      }
    }
    return 0;
  }
}
