package dev.flatpull.snapshotter.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.convert.ConvertedLayer;
import dev.flatpull.fetcher.convert.LazyLayerWriter;
import dev.flatpull.fetcher.layer.BlobReader;
import dev.flatpull.fetcher.layer.EstargzToc;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerOpener;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.layer.ZstdChunkedToc;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.Platform;
import dev.flatpull.fetcher.reference.ImageReference;
import dev.flatpull.fetcher.registry.FetchListener;
import dev.flatpull.fetcher.registry.RegistryClient;
import dev.flatpull.fetcher.registry.RegistryClients;
import dev.flatpull.fetcher.tar.TarHeader;
import dev.flatpull.fetcher.tar.TarWriter;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;

/**
 * Runs a remote layer's whole cold path once on a synthetic image, so that a node's first remote Prepare is as fast as
 * its later ones. On a fresh JVM, opening the Debian + python3 layer's TOC took about 650 ms (the transfer is under
 * 100 ms at 200 Mbit/s; the rest was gunzip, hashing and JSON parsing not yet compiled), the first mount paid about
 * 180 ms for binding libfuse, and the first registry request about 160 ms for loading the HTTP client (a manifest
 * took 170 ms on loopback, later ones 8 ms). Here an image of a few thousand files (some of many chunks) is written in
 * both lazy formats and served by a {@link LoopbackRegistry}; a real registry client (its own, counted nowhere)
 * resolves it and opens each layer's TOC over HTTP, three times, then parses the TOCs from memory until compiled; then one layer is mounted and files are read through
 * it (a throwaway page cache, so nothing synthetic reaches the host's cache). Everything lives under {@code dir} and
 * is deleted afterwards.
 */
public final class WarmUp {
  private static final int FILES = 4000;
  // Files of four chunks each: a real TOC (Debian + python3 at 16 KiB chunks: 8,350 files, 5.5 MB of JSON) is mostly
  // chunk entries, whose parsing stays slow until compiled.
  private static final int LARGE_FILES = 300;
  // Parsing is what needs many rounds before the JIT compiler has finished with it: the python layer's TOC parsed in
  // 870 ms the first time, 200-300 ms after 3 rounds, 65 ms after 15.
  private static final int PARSE_ROUNDS = 12;
  private static final String REPOSITORY = "flatpull/warm-up";
  private static final ObjectMapper JSON = new ObjectMapper();

  private WarmUp() {}

  /** The FUSE manager's cold path: resolve, TOCs of both formats, tree, mount, reads. */
  public static void run(Path dir) throws IOException {
    Files.createDirectories(dir);
    try (LoopbackRegistry registry = LoopbackRegistry.start()) {
      List<Layer> blobs = syntheticLayers(dir);
      serveImage(registry, blobs);
      FlatpullConfig config = config(dir);
      ImageReference ref = ImageReference.parse(registry.address() + "/" + REPOSITORY + ":latest");
      try (RegistryClients clients = RegistryClients.create(config, FetchListener.NONE)) {
        RegistryClient client = clients.client(ref);
        LazyLayer last = null;
        List<Descriptor> layers = List.of();
        for (int round = 0; round < 3; round++) {
          layers = client.resolve(ref, Platform.current()).manifest().layers();
          for (Descriptor d : layers) {
            last = new LayerOpener(client, config, dir.resolve("work")).open(d);
            LayerTree.of(last.index());
          }
        }
        for (int round = 0; round < PARSE_ROUNDS; round++) {
          for (int i = 0; i < layers.size(); i++) {
            byte[] blob = blobs.get(i).blob();
            BlobReader memory = range -> Arrays.copyOfRange(blob, (int) range.offset(), (int) range.end());
            LayerTree.of(layers.get(i).mediaType().equals(MediaTypes.OCI_LAYER_GZIP)
                ? EstargzToc.read(layers.get(i), memory, config.limits())
                : ZstdChunkedToc.read(layers.get(i), memory, config.limits()));
          }
        }
        try (PageCache cache = PageCache.open(dir.resolve("cache"),
            new CacheSettings(Optional.empty(), 8L << 20, 64L << 20, CacheSettings.DEFAULTS.reservationWait()));
            LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(last.index()),
                new LayerContentReader(last, cache), FuseEvents.NONE), dir.resolve("mount"))) {
          Files.readAllBytes(m.mountPoint().resolve(name(7)));
          Files.readAllBytes(m.mountPoint().resolve("usr/share/warm/large3"));
        }
      }
    } catch (dev.flatpull.config.ConfigException e) {
      throw new IOException(e);
    } finally {
      deleteTree(dir);
    }
  }

  /** The snapshotter daemon's cold path: resolving a manifest through the registry client, three times. */
  public static void resolve(Path dir) throws IOException {
    Files.createDirectories(dir);
    try (LoopbackRegistry registry = LoopbackRegistry.start()) {
      ConvertedLayer tiny = new LazyLayerWriter(LayerFormat.ESTARGZ, LazyLayerWriter.DEFAULT_CHUNK_SIZE, 1)
          .write(tar(dir, 10, 0), dir.resolve("tiny"), List.of());
      serveImage(registry, List.of(new Layer(descriptor(LayerFormat.ESTARGZ, tiny), Files.readAllBytes(tiny.blob()))));
      ImageReference ref = ImageReference.parse(registry.address() + "/" + REPOSITORY + ":latest");
      try (RegistryClients clients = RegistryClients.create(config(dir), FetchListener.NONE)) {
        for (int round = 0; round < 3; round++) {
          clients.client(ref).resolve(ref, Platform.current());
        }
      }
    } catch (dev.flatpull.config.ConfigException e) {
      throw new IOException(e);
    } finally {
      deleteTree(dir);
    }
  }

  private record Layer(Descriptor descriptor, byte[] blob) {}

  private static FlatpullConfig config(Path dir) throws dev.flatpull.config.ConfigException {
    // No hosts.toml: a node's _default mirror must not receive the loopback registry's requests.
    return FlatpullConfig.parse("warm-up", "root = \"" + dir + "\"\n[registry]\nplain_http = true\n"
        + "config_path = \"\"\nmax_attempts = 1\nconnect_timeout = \"2s\"\nread_timeout = \"10s\"\n");
  }

  /** A layer of {@code FILES} small files and {@code LARGE_FILES} of many chunks, in both lazy formats. */
  private static List<Layer> syntheticLayers(Path dir) throws IOException {
    Path tar = tar(dir, FILES, LARGE_FILES);
    List<Layer> out = new ArrayList<>();
    for (LayerFormat format : List.of(LayerFormat.ESTARGZ, LayerFormat.ZSTD_CHUNKED)) {
      ConvertedLayer c = new LazyLayerWriter(format, LazyLayerWriter.DEFAULT_CHUNK_SIZE, 1)
          .write(tar, dir.resolve("warm-up-" + format), List.of());
      out.add(new Layer(descriptor(format, c), Files.readAllBytes(c.blob())));
    }
    return out;
  }

  private static Descriptor descriptor(LayerFormat format, ConvertedLayer c) {
    return new Descriptor(format == LayerFormat.ESTARGZ ? MediaTypes.OCI_LAYER_GZIP : MediaTypes.OCI_LAYER_ZSTD,
        c.digest(), c.size(), c.annotations());
  }

  /**
   * A layer as varied as a distribution's: directories, symbolic and hard links, a device, extended attributes,
   * several owners, modes and modification times, long names. The parser's compiled code is only as good as the
   * profile it was compiled with: on a warm-up of regular files alone, the first real TOC (Debian + python3) threw the
   * compiled parser, tree builder and JSON name lookup away and ran interpreted again (424 ms against 100-170 later).
   */
  private static Path tar(Path dir, int files, int largeFiles) throws IOException {
    Path tar = dir.resolve("warm-up-" + files + ".tar");
    try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(tar))) {
      for (int d = 0; d < 40; d++) {
        entry(out, new TarHeader("usr/lib/warm/" + d + "/", TarHeader.DIR, 0, 0755, 0, 0, "root", "root",
            time(d), "", 0, 0, java.util.Map.of()), new byte[0]);
      }
      entry(out, new TarHeader("usr/share/warm/", TarHeader.DIR, 0, 0755, 0, 0, "root", "root", time(0), "", 0, 0,
          java.util.Map.of()), new byte[0]);
      for (int i = 0; i < files; i++) {
        String name = name(i);
        if (i % 10 == 9) {
          entry(out, new TarHeader(name, TarHeader.SYMLINK, 0, 0777, 0, 0, "root", "root", time(i), "f" + (i - 1)
              + ".py", 0, 0, java.util.Map.of()), new byte[0]);
        } else if (i % 50 == 49) {
          entry(out, new TarHeader(name, TarHeader.HARDLINK, 0, 0644, 0, 0, "root", "root", time(i),
              name(i - 1), 0, 0, java.util.Map.of()), new byte[0]);
        } else {
          byte[] content = ("warm-up " + i + "\n").repeat(1 + i % 7).getBytes();
          entry(out, new TarHeader(name, TarHeader.REG, content.length, i % 4 == 0 ? 0755 : 0644, i % 7 == 0 ? 1000
              : 0, i % 7 == 0 ? 1000 : 0, i % 7 == 0 ? "" : "root", i % 7 == 0 ? "" : "root", time(i), "", 0, 0,
              i % 100 == 0 ? java.util.Map.of("user.warm-up", new byte[] {1, 2}) : java.util.Map.of()), content);
        }
      }
      entry(out, new TarHeader("usr/lib/warm/null", TarHeader.CHAR, 0, 0666, 0, 0, "root", "root", time(1), "", 1,
          3, java.util.Map.of()), new byte[0]);
      for (int i = 0; i < largeFiles; i++) {
        byte[] content = ("large warm-up file " + i + " line\n").repeat(2300).getBytes();
        entry(out, new TarHeader("usr/share/warm/large" + i, TarHeader.REG, content.length, 0644, 0, 0, "root",
            "root", time(i), "", 0, 0, java.util.Map.of()), content);
      }
      TarWriter.writeEnd(out);
    }
    return tar;
  }

  private static String name(int i) {
    return "usr/lib/warm/" + (i % 40) + "/" + (i % 3 == 0 ? "lib-with-a-longer-name-" : "f") + i
        + (i % 5 == 0 ? ".cpython-311-x86_64-linux-gnu.so" : ".py");
  }

  private static Instant time(int i) {
    return Instant.ofEpochSecond(1_700_000_000L + 37L * (i % 500));
  }

  private static void entry(OutputStream out, TarHeader h, byte[] content) throws IOException {
    TarWriter.writeHeader(out, h);
    out.write(content);
    TarWriter.pad(out, content.length);
  }

  /** Serves {@code layers} as one image, {@code REPOSITORY:latest}, with an empty config. */
  private static void serveImage(LoopbackRegistry registry, List<Layer> layers) throws IOException {
    byte[] config = "{}".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    registry.blob(REPOSITORY, Digest.sha256(config), config);
    ObjectNode m = JSON.createObjectNode().put("schemaVersion", 2).put("mediaType", MediaTypes.OCI_MANIFEST);
    m.putObject("config").put("mediaType", MediaTypes.OCI_CONFIG).put("digest", Digest.sha256(config).toString())
        .put("size", config.length);
    ArrayNode ls = m.putArray("layers");
    for (Layer l : layers) {
      registry.blob(REPOSITORY, l.descriptor().digest(), l.blob());
      ObjectNode d = ls.addObject().put("mediaType", l.descriptor().mediaType())
          .put("digest", l.descriptor().digest().toString()).put("size", l.descriptor().size());
      ObjectNode a = d.putObject("annotations");
      l.descriptor().annotations().forEach(a::put);
    }
    registry.manifest(REPOSITORY, "latest", MediaTypes.OCI_MANIFEST, JSON.writeValueAsBytes(m));
  }

  private static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (var walk = Files.walk(dir)) {
      for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }
}
