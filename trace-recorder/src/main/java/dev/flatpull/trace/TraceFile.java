package dev.flatpull.trace;

import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.EOFException;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;
import java.util.zip.ZipException;

/**
 * The trace file: gzip-compressed JSON, self-describing (docs/traces.md). Page runs are arrays
 * {@code [file, firstPage, pages, firstAccessMicros, frequency]} so that a start-up of tens of thousands of pages stays
 * small. Readers refuse files of a newer format, truncated or corrupt files, and files whose contents disagree with
 * themselves (the service key, the totals), naming the byte offset and the reason.
 */
public final class TraceFile {
  public static final String FORMAT = "flatpull-trace";
  private static final ObjectMapper JSON = new ObjectMapper();

  private TraceFile() {}

  /** Writes {@code trace} to {@code file} atomically (a temporary file renamed into place). */
  public static void write(Trace trace, Path file) throws IOException {
    Path dir = file.toAbsolutePath().getParent();
    Files.createDirectories(dir);
    Path temp = Files.createTempFile(dir, ".trace", ".tmp");
    try {
      try (OutputStream out = new GZIPOutputStream(Files.newOutputStream(temp), 1 << 16)) {
        JSON.writeValue(out, toJson(trace));
      }
      Files.move(temp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } finally {
      Files.deleteIfExists(temp);
    }
  }

  /** Layer traces as JSON text, for handing a recording from one process to another. */
  public static String layersToJson(List<LayerTrace> layers) {
    ArrayNode arr = JSON.createArrayNode();
    layers.forEach(l -> arr.add(layerJson(l)));
    return arr.toString();
  }

  /** The inverse of {@link #layersToJson}. */
  public static List<LayerTrace> layersFromJson(String json) throws TraceFormatException {
    JsonNode arr;
    try {
      arr = JSON.readTree(json);
    } catch (JsonProcessingException e) {
      throw new TraceFormatException("recorded layers: " + e.getOriginalMessage(), e);
    }
    ObjectNode holder = JSON.createObjectNode();
    holder.set("layers", arr);
    return layers("recorded layers", new Fields("recorded layers"), holder);
  }

  private static ObjectNode layerJson(LayerTrace l) {
    ObjectNode n = JSON.createObjectNode();
    n.put("digest", l.layerDigest());
    n.put("pages", l.pages());
    l.files().forEach(n.putArray("files")::add);
    ArrayNode runs = n.putArray("runs");
    for (PageRun r : l.runs()) {
      runs.addArray().add(r.file()).add(r.firstPage()).add(r.pages()).add(r.firstAccessMicros()).add(r.frequency());
    }
    return n;
  }

  public static ObjectNode toJson(Trace t) {
    ObjectNode root = JSON.createObjectNode();
    root.put("format", FORMAT);
    root.put("version", Trace.FORMAT_VERSION);
    root.set("service", serviceJson(t.service()));
    root.put("flatpullVersion", t.flatpullVersion());
    root.put("recordedAt", t.recordedAt().toString());
    t.readyMillis().forEach(root.putArray("readyMillis")::add);
    root.put("pages", t.pages());
    root.put("bytes", t.bytes());
    ArrayNode layers = root.putArray("layers");
    t.layers().forEach(l -> layers.add(layerJson(l)));
    return root;
  }

  /** A service version as JSON, with its key (the form traces and runtime-image indexes share). */
  public static ObjectNode serviceJson(ServiceVersion v) {
    ObjectNode s = JSON.createObjectNode();
    s.put("key", v.key());
    s.put("image", v.image());
    s.put("manifestDigest", v.manifestDigest());
    s.put("platform", v.platform());
    v.command().forEach(s.putArray("command")::add);
    v.environment().forEach(s.putArray("environment")::add);
    s.put("workingDirectory", v.workingDirectory());
    v.probes().forEach(s.putArray("probes")::add);
    return s;
  }

  /**
   * The inverse of {@link #serviceJson}, refusing a {@code key} that does not match the service it describes.
   *
   * @param name what holds it, for error messages
   */
  public static ServiceVersion serviceFromJson(String name, JsonNode s) throws TraceFormatException {
    Fields f = new Fields(name);
    if (s == null || !s.isObject()) {
      throw new TraceFormatException(name + ": 'service' is missing or not an object");
    }
    ServiceVersion service = new ServiceVersion(f.text(s, "image"), f.text(s, "manifestDigest"),
        f.text(s, "platform"), f.texts(s, "command"), f.texts(s, "environment"), f.text(s, "workingDirectory"),
        f.texts(s, "probes"));
    if (!service.key().equals(f.text(s, "key"))) {
      throw new TraceFormatException(name + ": service.key does not match the service it describes (edited?)");
    }
    return service;
  }

  /**
   * The largest trace file, compressed or decompressed, that is read: a start-up's trace is tens to hundreds of KiB
   * (page runs, not pages), so 64 MiB is far beyond a real one and still bounds what a hostile or broken file (a gzip
   * bomb, a runaway recording) can take of a CI runner's or node's memory, as the limits on TOCs and manifests do.
   */
  public static final long MAX_BYTES = 64L << 20;

  public static Trace read(Path file) throws IOException {
    return read(file, MAX_BYTES);
  }

  static Trace read(Path file, long maxBytes) throws IOException {
    long size = Files.size(file);
    if (size > maxBytes) {
      throw new TraceFormatException(file + ": " + size + " bytes, more than a trace file may have (" + maxBytes + ")");
    }
    CountingStream counted = new CountingStream(Files.newInputStream(file));
    JsonNode root;
    try (InputStream in = new dev.flatpull.core.BoundedInputStream(new GZIPInputStream(counted, 1 << 16),
        file + ": decompressed trace", maxBytes)) {
      root = JSON.readTree(in);
    } catch (dev.flatpull.core.SizeLimitExceededException e) {
      throw new TraceFormatException(file + ": decompresses to more than a trace may have (" + maxBytes + " bytes)", e);
    } catch (ZipException e) {
      throw new TraceFormatException(file + ": byte " + counted.count + ": not a gzip-compressed trace ("
          + e.getMessage() + ")", e);
    } catch (EOFException e) {
      throw new TraceFormatException(file + ": byte " + counted.count + ": truncated (the file ends inside its"
          + " compressed data)", e);
    } catch (JsonProcessingException e) {
      JsonLocation at = e.getLocation();
      throw new TraceFormatException(file + ": byte " + (at == null ? "?" : at.getByteOffset())
          + " of the decompressed JSON: " + e.getOriginalMessage(), e);
    }
    if (root == null || !root.isObject()) {
      throw new TraceFormatException(file + ": empty, or not a JSON object");
    }
    return fromJson(file.toString(), root);
  }

  static Trace fromJson(String name, JsonNode root) throws TraceFormatException {
    Fields f = new Fields(name);
    if (!FORMAT.equals(root.path("format").asText())) {
      throw new TraceFormatException(name + ": not a flatpull trace (format is '" + root.path("format").asText() + "')");
    }
    int version = (int) f.integer(root, "version");
    if (version > Trace.FORMAT_VERSION || version < 1) {
      throw new TraceFormatException(name + ": trace format version " + version + " is not supported (this flatpull"
          + " reads version " + Trace.FORMAT_VERSION + ")");
    }
    ServiceVersion service = serviceFromJson(name, f.object(root, "service"));
    Instant recordedAt;
    try {
      recordedAt = Instant.parse(f.text(root, "recordedAt"));
    } catch (DateTimeParseException e) {
      throw new TraceFormatException(name + ": recordedAt is not an instant: " + e.getParsedString());
    }
    List<Long> ready = new ArrayList<>();
    for (JsonNode n : f.array(root, "readyMillis")) {
      ready.add(n.asLong());
    }
    List<LayerTrace> layers = layers(name, f, root);
    try {
      Trace t = new Trace(service, f.text(root, "flatpullVersion"), recordedAt, ready, layers);
      if (t.pages() != f.integer(root, "pages")) {
        throw new TraceFormatException(name + ": the layers hold " + t.pages() + " pages, but 'pages' says "
            + f.integer(root, "pages"));
      }
      return t;
    } catch (IllegalArgumentException e) {
      throw new TraceFormatException(name + ": " + e.getMessage());
    }
  }

  private static List<LayerTrace> layers(String name, Fields f, JsonNode root) throws TraceFormatException {
    List<LayerTrace> layers = new ArrayList<>();
    JsonNode arr = f.array(root, "layers");
    for (int i = 0; i < arr.size(); i++) {
      JsonNode l = arr.get(i);
      String where = "layers[" + i + "]";
      List<PageRun> runs = new ArrayList<>();
      JsonNode rs = f.array(l, "runs");
      for (int j = 0; j < rs.size(); j++) {
        JsonNode r = rs.get(j);
        if (!r.isArray() || r.size() != 5) {
          throw new TraceFormatException(name + ": " + where + ".runs[" + j + "] is not [file, page, pages, µs, frequency]");
        }
        try {
          runs.add(new PageRun(r.get(0).asInt(), r.get(1).asLong(), r.get(2).asInt(), r.get(3).asLong(),
              r.get(4).asInt()));
        } catch (IllegalArgumentException e) {
          throw new TraceFormatException(name + ": " + where + ".runs[" + j + "]: " + e.getMessage());
        }
      }
      try {
        LayerTrace t = new LayerTrace(f.text(l, "digest"), f.texts(l, "files"), runs);
        if (t.pages() != f.integer(l, "pages")) {
          throw new TraceFormatException(name + ": " + where + ": runs hold " + t.pages() + " pages, but 'pages' says "
              + f.integer(l, "pages"));
        }
        layers.add(t);
      } catch (IllegalArgumentException e) {
        throw new TraceFormatException(name + ": " + where + ": " + e.getMessage());
      }
    }
    return layers;
  }

  /** Typed access to JSON fields, with errors that name the field. */
  private record Fields(String name) {
    JsonNode object(JsonNode n, String field) throws TraceFormatException {
      JsonNode v = n.get(field);
      if (v == null || !v.isObject()) {
        throw new TraceFormatException(name + ": '" + field + "' is missing or not an object");
      }
      return v;
    }

    JsonNode array(JsonNode n, String field) throws TraceFormatException {
      JsonNode v = n.get(field);
      if (v == null || !v.isArray()) {
        throw new TraceFormatException(name + ": '" + field + "' is missing or not an array");
      }
      return v;
    }

    String text(JsonNode n, String field) throws TraceFormatException {
      JsonNode v = n.get(field);
      if (v == null || !v.isTextual()) {
        throw new TraceFormatException(name + ": '" + field + "' is missing or not a string");
      }
      return v.asText();
    }

    long integer(JsonNode n, String field) throws TraceFormatException {
      JsonNode v = n.get(field);
      if (v == null || !v.isIntegralNumber()) {
        throw new TraceFormatException(name + ": '" + field + "' is missing or not an integer");
      }
      return v.asLong();
    }

    List<String> texts(JsonNode n, String field) throws TraceFormatException {
      List<String> out = new ArrayList<>();
      for (JsonNode v : array(n, field)) {
        if (!v.isTextual()) {
          throw new TraceFormatException(name + ": '" + field + "' holds a non-string");
        }
        out.add(v.asText());
      }
      return out;
    }
  }

  /** Counts the compressed bytes consumed, to say where a corrupt file went wrong. */
  private static final class CountingStream extends FilterInputStream {
    long count;

    CountingStream(InputStream in) {
      super(in);
    }

    @Override
    public int read() throws IOException {
      int b = super.read();
      if (b >= 0) {
        count++;
      }
      return b;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      int n = super.read(b, off, len);
      if (n > 0) {
        count += n;
      }
      return n;
    }
  }
}
