package dev.flatpull.snapshotter.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.layer.LayerFormat;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.snapshotter.warmup.LoopbackRegistry;
import dev.flatpull.snapshotter.warmup.WarmUp;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/** {@code flatpull inspect} against a registry on loopback serving an image of one layer in each lazy format. */
class InspectCommandTest {
  @TempDir Path dir;

  private record Ran(int exit, String out, String err) {}

  private Ran inspect(String... args) throws Exception {
    Path config = Files.writeString(dir.resolve("config.toml"), "root = \"" + dir.resolve("root")
        + "\"\n[registry]\nplain_http = true\nconfig_path = \"\"\nmax_attempts = 1\n");
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    PrintStream stdout = System.out;
    PrintStream stderr = System.err;
    System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
    System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
    try {
      String[] all = new String[args.length + 3];
      all[0] = "inspect";
      all[1] = "--config";
      all[2] = config.toString();
      System.arraycopy(args, 0, all, 3, args.length);
      int exit = new CommandLine(new FlatpullCommand()).execute(all);
      return new Ran(exit, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    } finally {
      System.setOut(stdout);
      System.setErr(stderr);
    }
  }

  @Test
  void eachLayersFormatAndToc_asTheIndexesReadThemSay() throws Exception {
    List<WarmUp.Layer> layers = WarmUp.syntheticLayers(dir);
    try (LoopbackRegistry registry = LoopbackRegistry.start()) {
      WarmUp.serveImage(registry, layers);
      String ref = registry.address() + "/" + WarmUp.REPOSITORY + ":latest";

      Ran json = inspect("--json", ref);
      Ran table = inspect(ref);

      assertEquals(0, json.exit(), json.err());
      JsonNode report = new ObjectMapper().readTree(json.out());
      assertEquals(ref, report.get("reference").asText());
      assertEquals(Digest.sha256(registry.content().manifest("latest").orElseThrow()).toString(),
          report.get("manifestDigest").asText());
      JsonNode listed = report.get("layers");
      assertEquals(2, listed.size());
      for (int i = 0; i < 2; i++) {
        WarmUp.Layer layer = layers.get(i);
        LayerFormat format = LayerFormat.of(layer.descriptor());
        LayerIndex index = format.readToc(layer.descriptor(),
            range -> Arrays.copyOfRange(layer.blob(), (int) range.offset(), (int) range.end()), FetchLimits.DEFAULTS);
        JsonNode l = listed.get(i);
        assertEquals(InspectCommand.formatName(format), l.get("format").asText());
        assertEquals(layer.descriptor().digest().toString(), l.get("digest").asText());
        assertEquals(index.entries().size(), l.get("entries").asInt());
        assertEquals(index.chunkCount(), l.get("chunks").asInt());
        assertEquals(index.contentSize(), l.get("contentBytes").asLong());
        assertEquals(index.tocDigest().orElseThrow().toString(), l.get("tocDigest").asText());
        assertTrue(l.get("diffIdMatches").isNull(), "nothing verified without --verify");
      }
      assertEquals(0, table.exit(), table.err());
      assertTrue(table.out().contains("manifest:   " + report.get("manifestDigest").asText()), table.out());
      assertTrue(table.out().contains(" estargz ") && table.out().contains(" zstd:chunked "), table.out());
      assertTrue(table.out().contains("layer 1: TOC checked against the layer's tar-split"), table.out());
    }
  }

  /** Serves {@code layer} as {@code TAG}, its config giving {@code diffId} as the layer's. */
  private static void serve(LoopbackRegistry registry, String tag, InMemoryLayer layer, Digest diffId) {
    byte[] config = ("{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\","
        + "\"diff_ids\":[\"" + diffId + "\"]}}").getBytes(StandardCharsets.UTF_8);
    Descriptor c = new Descriptor(MediaTypes.OCI_CONFIG, registry.content().putBlob(config), config.length, Map.of());
    registry.content().putBlob(layer.blob());
    registry.content().putManifest(tag, MediaTypes.OCI_MANIFEST,
        OciDocuments.writeManifest(MediaTypes.OCI_MANIFEST, c, List.of(layer.descriptor()), Map.of()));
  }

  @Test
  void verify_comparesEachLayersDiffIdWithTheConfigs_andExitsOneOnAMismatch() throws Exception {
    InMemoryLayer layer = InMemoryLayer.estargz(LayerTar.of(Map.of("etc/motd", "hello\n".getBytes())), dir);
    try (LoopbackRegistry registry = LoopbackRegistry.start()) {
      serve(registry, "right", layer, layer.converted().diffId());
      serve(registry, "wrong", layer, Digest.sha256(new byte[0]));
      String repo = registry.address() + "/" + WarmUp.REPOSITORY;

      Ran right = inspect("--verify", repo + ":right");
      Ran wrong = inspect("--verify", "--json", repo + ":wrong");

      assertEquals(0, right.exit(), right.out() + right.err());
      assertTrue(right.out().contains("layer 0: diff_id " + layer.converted().diffId() + " matches"), right.out());
      assertEquals(1, wrong.exit(), wrong.out() + wrong.err());
      assertTrue(wrong.err().contains("MISMATCH: layer " + layer.descriptor().digest()), wrong.err());
      JsonNode l = new ObjectMapper().readTree(wrong.out()).get("layers").get(0);
      assertEquals(Digest.sha256(new byte[0]).toString(), l.get("diffId").asText());
      assertFalse(l.get("diffIdMatches").asBoolean());
    }
  }

  @Test
  void anAbsentTag_failsNamingIt() throws Exception {
    try (LoopbackRegistry registry = LoopbackRegistry.start()) {
      Ran ran = inspect(registry.address() + "/" + WarmUp.REPOSITORY + ":absent");

      assertTrue(ran.exit() != 0, ran.out());
      assertTrue(ran.err().contains("absent"), ran.err());
    }
  }
}
