package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Progress;
import dev.flatpull.fetcher.convert.ImageConverter;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClients;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code flatpull convert SRC DST}: rewrite an image's layers in a lazily readable format and push it. */
@Command(name = "convert", mixinStandardHelpOptions = true,
    description = {"Convert an image (layers of any compression) to eStargz or zstd:chunked and push it to DST.",
        "Files listed with --prioritize are placed first (eStargz: before the prefetch landmark)."})
final class ConvertCommand implements Callable<Integer> {
  @Mixin GlobalOptions global;

  @Parameters(index = "0", paramLabel = "SRC", description = "Source image reference.")
  String source;

  @Parameters(index = "1", paramLabel = "DST", description = "Destination image reference (a tag).")
  String destination;

  @Option(names = "--format", paramLabel = "FORMAT", defaultValue = "estargz", converter = FormatConverter.class,
      description = "estargz or zstd-chunked (default: ${DEFAULT-VALUE}).")
  LayerFormat format;

  @Option(names = "--chunk-size", paramLabel = "BYTES", defaultValue = "" + LazyLayerWriter.DEFAULT_CHUNK_SIZE,
      description = "Largest chunk of one file in a gzip member / zstd frame (default: ${DEFAULT-VALUE}).")
  long chunkSize;

  @Option(names = "--prioritize", paramLabel = "FILE_LIST",
      description = "File with one path per line to place first, in that order.")
  Path prioritize;

  @Option(names = "--level", paramLabel = "N",
      description = "Compression level (gzip 1-9, default 9 as ctr-remote; zstd 1-19, default 3).")
  Integer level;

  @Option(names = "--quiet", description = "No progress on standard error (by default each step, and the bytes, rate and"
      + " time left of the one in progress: rewritten in place on a terminal, a line every 5 s when piped).")
  boolean quiet;

  static final class FormatConverter implements ITypeConverter<LayerFormat> {
    @Override
    public LayerFormat convert(String value) {
      return switch (value) {
        case "estargz" -> LayerFormat.ESTARGZ;
        case "zstd-chunked", "zstd:chunked", "zstdchunked" -> LayerFormat.ZSTD_CHUNKED;
        default -> throw new IllegalArgumentException("unknown format '" + value + "' (estargz, zstd-chunked)");
      };
    }
  }

  @Override
  public Integer call() throws Exception {
    FlatpullConfig config = global.load();
    ImageReference src = ImageReference.parse(source);
    ImageReference dst = ImageReference.parse(destination);
    List<String> prioritized = prioritize == null ? List.of()
        : Files.readAllLines(prioritize).stream().map(String::trim).filter(s -> !s.isEmpty() && !s.startsWith("#")).toList();
    int lvl = level != null ? level : (format == LayerFormat.ESTARGZ ? 9 : 3);
    ProgressDisplay display = ProgressDisplay.onStandardError();
    Path work = Files.createTempDirectory("flatpull-convert");
    try (RegistryClients clients = global.clients(config, FetchListener.NONE)) {
      ImageConverter converter = new ImageConverter(config.limits(), work, quiet ? Progress.NONE : display);
      ImageConverter.Result result = converter.convert(
          clients.client(src), src, clients.client(dst), dst,
          new ImageConverter.Options(format, chunkSize, prioritized, lvl, global.platform()));
      System.out.println(result.destination() + "@" + result.manifestDigest());
    } finally {
      display.clearStatus();
      CatCommand.deleteTree(work);
    }
    return 0;
  }
}
