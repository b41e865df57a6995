package dev.flatpull.runtimeimage;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.github.luben.zstd.Zstd;
import com.github.luben.zstd.ZstdException;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Frame;
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import dev.flatpull.runtimeimage.RuntimeImageIndex.TraceSummary;
import dev.flatpull.trace.ServiceVersion;
import dev.flatpull.trace.TraceFile;
import dev.flatpull.trace.TraceFormatException;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The runtime-image blob (docs/runtime-images.md, version {@value #VERSION}):
 *
 * <pre>
 *   0   zstd skippable frame: magic 0x184D2A5E, length 16, "flatpull", version (u32 LE), index length (u32 LE)
 *   24  the index: one zstd frame of JSON
 *   24+index length   the content frames, each an independent zstd frame, contiguous, in the index's order
 * </pre>
 *
 * The whole blob is a valid zstd stream (the header is a skippable frame), the index comes first so that one GET
 * streams index then content, and a frame can be fetched and decoded alone by range. Readers refuse, naming the byte
 * offset or field and the reason: other data, a newer version, a truncated blob, and an index inconsistent with
 * itself (frames not contiguous, an extent outside its frame or file table, overlapping extents, a page mode extent
 * that is not one page).
 */
public final class RuntimeImageFormat {
  public static final String FORMAT = "flatpull-runtime-image";
  public static final int VERSION = 1;
  public static final int HEADER_SIZE = 24;
  /** Largest index, compressed or not: a runtime image of a million extents stays below it. */
  public static final int MAX_INDEX_BYTES = 256 << 20;
  /** Largest frame, decompressed. */
  public static final int MAX_FRAME_BYTES = 64 << 20;
  public static final int PAGE_SIZE = 4096;

  private static final int SKIPPABLE_MAGIC = 0x184D2A5E;
  private static final byte[] TAG = "flatpull".getBytes(StandardCharsets.US_ASCII);
  private static final ObjectMapper JSON = new ObjectMapper();

  private RuntimeImageFormat() {}

  /** A parsed index and where the content begins. */
  public record Layout(RuntimeImageIndex index, int indexLength) {
    /** The blob offset of the first content frame. */
    public long dataStart() {
      return HEADER_SIZE + (long) indexLength;
    }

    /** The blob's size: header, index and every frame. */
    public long blobSize() {
      return dataStart() + index.storedBytes();
    }

    /** Where frame {@code i} lies in the blob. */
    public long frameStart(int i) {
      return dataStart() + index.frames().get(i).offset();
    }

    /** The stored (compressed) frames of {@code blob}, laid out as this says, in order. */
    public List<byte[]> frames(byte[] blob) {
      List<byte[]> frames = new ArrayList<>(index.frames().size());
      for (int i = 0; i < index.frames().size(); i++) {
        int start = (int) frameStart(i);
        frames.add(Arrays.copyOfRange(blob, start, start + index.frames().get(i).length()));
      }
      return frames;
    }
  }

  /**
   * The blob of {@code index} (whose frames' offsets and lengths must describe {@code frames}) and the compressed
   * {@code frames}, in order.
   */
  public static byte[] write(RuntimeImageIndex index, List<byte[]> frames) {
    if (frames.size() != index.frames().size()) {
      throw new IllegalArgumentException(frames.size() + " frames for an index of " + index.frames().size());
    }
    byte[] json;
    try {
      json = JSON.writeValueAsBytes(toJson(index));
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot serialise a runtime-image index", e);
    }
    byte[] compressedIndex = Zstd.compress(json, 9);
    ByteArrayOutputStream out = new ByteArrayOutputStream(HEADER_SIZE + compressedIndex.length
        + (int) Math.min(Integer.MAX_VALUE - 64, index.storedBytes()));
    out.writeBytes(header(compressedIndex.length));
    out.writeBytes(compressedIndex);
    for (int i = 0; i < frames.size(); i++) {
      if (frames.get(i).length != index.frames().get(i).length()) {
        throw new IllegalArgumentException("frame " + i + " is " + frames.get(i).length + " bytes, the index says "
            + index.frames().get(i).length());
      }
      out.writeBytes(frames.get(i));
    }
    return out.toByteArray();
  }

  private static byte[] header(int indexLength) {
    ByteBuffer b = ByteBuffer.allocate(HEADER_SIZE).order(ByteOrder.LITTLE_ENDIAN);
    b.putInt(SKIPPABLE_MAGIC).putInt(16).put(TAG).putInt(VERSION).putInt(indexLength);
    return b.array();
  }

  /**
   * The compressed index length that the header (the first {@value #HEADER_SIZE} bytes) announces.
   *
   * @throws RuntimeImageFormatException for anything but a runtime image of a version this code reads
   */
  public static int indexLength(byte[] head) throws RuntimeImageFormatException {
    if (head.length < HEADER_SIZE) {
      throw new RuntimeImageFormatException("byte " + head.length + ": truncated inside the " + HEADER_SIZE
          + "-byte header");
    }
    ByteBuffer b = ByteBuffer.wrap(head, 0, HEADER_SIZE).order(ByteOrder.LITTLE_ENDIAN);
    int magic = b.getInt();
    int length = b.getInt();
    byte[] tag = new byte[TAG.length];
    b.get(tag);
    if (magic != SKIPPABLE_MAGIC || length != 16 || !Arrays.equals(tag, TAG)) {
      throw new RuntimeImageFormatException("byte 0: not a flatpull runtime image (no flatpull header)");
    }
    int version = b.getInt();
    if (version < 1 || version > VERSION) {
      throw new RuntimeImageFormatException("byte 16: runtime-image format version " + Integer.toUnsignedString(version)
          + " is not supported (this flatpull reads version " + VERSION + ")");
    }
    int indexLength = b.getInt();
    if (indexLength <= 0 || indexLength > MAX_INDEX_BYTES) {
      throw new RuntimeImageFormatException("byte 20: index length " + Integer.toUnsignedString(indexLength)
          + " is outside 1.." + MAX_INDEX_BYTES);
    }
    return indexLength;
  }

  /**
   * Reads the index from the start of a blob ({@code head} holds at least the header and the index).
   *
   * @throws RuntimeImageFormatException naming the offset or field and the reason
   */
  public static Layout readIndex(byte[] head) throws RuntimeImageFormatException {
    return readIndex(head, MAX_INDEX_BYTES);
  }

  /**
   * Reads the index, refusing one whose zstd frame announces more than {@code maxIndexBytes} decompressed before it
   * decompresses anything (a few kilobytes of zstd can announce and produce hundreds of megabytes).
   *
   * @throws RuntimeImageLimitException when the index is larger than {@code maxIndexBytes}
   * @throws RuntimeImageFormatException naming the offset or field and the reason
   */
  public static Layout readIndex(byte[] head, long maxIndexBytes) throws RuntimeImageFormatException {
    int indexLength = indexLength(head);
    long size = checkIndexSize(head, maxIndexBytes);
    byte[] compressed = Arrays.copyOfRange(head, HEADER_SIZE, HEADER_SIZE + indexLength);
    byte[] json;
    try {
      json = Zstd.decompress(compressed, (int) size);
    } catch (ZstdException e) {
      throw new RuntimeImageFormatException("byte " + HEADER_SIZE + ": the index does not decompress: "
          + e.getMessage(), e);
    }
    if (json.length != size) {
      throw new RuntimeImageFormatException("byte " + HEADER_SIZE + ": the index decompressed to " + json.length
          + " bytes, its frame says " + size);
    }
    JsonNode root;
    try {
      root = JSON.readTree(json);
    } catch (java.io.IOException e) {
      String at = e instanceof JsonProcessingException j && j.getLocation() != null
          ? " at byte " + j.getLocation().getByteOffset() + " of the decompressed JSON" : "";
      throw new RuntimeImageFormatException("index" + at + ": not JSON: "
          + (e instanceof JsonProcessingException j ? j.getOriginalMessage() : e.getMessage()), e);
    }
    return new Layout(fromJson(root), indexLength);
  }

  /**
   * The decompressed size the index in {@code head} announces, refused when above {@code maxIndexBytes} (before
   * anything is decompressed) or when {@code head} does not hold the whole index.
   *
   * @throws RuntimeImageLimitException when the index is larger than {@code maxIndexBytes}
   * @throws RuntimeImageFormatException when it is truncated or not a zstd frame of a known size
   */
  public static long checkIndexSize(byte[] head, long maxIndexBytes) throws RuntimeImageFormatException {
    int indexLength = indexLength(head);
    if (head.length < HEADER_SIZE + (long) indexLength) {
      throw new RuntimeImageFormatException("byte " + head.length + ": truncated inside the index (it ends at byte "
          + (HEADER_SIZE + (long) indexLength) + ")");
    }
    long size = Zstd.getFrameContentSize(head, HEADER_SIZE, indexLength);
    if (size <= 0 || size > MAX_INDEX_BYTES) {
      throw new RuntimeImageFormatException("byte " + HEADER_SIZE + ": the index is not a zstd frame of a known size"
          + " within " + MAX_INDEX_BYTES + " bytes (" + size + ")");
    }
    if (size > maxIndexBytes) {
      throw new RuntimeImageLimitException("index_size", "byte " + HEADER_SIZE + ": the index announces " + size
          + " bytes decompressed, more than the " + maxIndexBytes + " an index of this image's TOCs can need"
          + " ([runtime_image] index_bytes_per_extent)");
    }
    return size;
  }

  /** Reads a whole blob's index and checks that the blob holds exactly its frames. */
  public static Layout read(byte[] blob) throws RuntimeImageFormatException {
    Layout layout = readIndex(blob);
    if (blob.length < layout.blobSize()) {
      int frame = 0;
      while (frame + 1 < layout.index().frames().size() && layout.frameStart(frame + 1) <= blob.length) {
        frame++;
      }
      throw new RuntimeImageFormatException("byte " + blob.length + ": truncated inside frame " + frame
          + " (the index describes " + layout.blobSize() + " bytes)");
    }
    if (blob.length > layout.blobSize()) {
      throw new RuntimeImageFormatException("byte " + layout.blobSize() + ": " + (blob.length - layout.blobSize())
          + " bytes after the last frame the index describes");
    }
    return layout;
  }

  // --- JSON ---

  /** The index as JSON (what the blob stores, and what {@code runtime-image show --json} prints). */
  public static ObjectNode toJson(RuntimeImageIndex index) {
    ObjectNode root = JSON.createObjectNode();
    root.put("format", FORMAT);
    root.put("version", VERSION);
    root.put("verify", index.verify().key());
    root.set("service", TraceFile.serviceJson(index.service()));
    root.put("flatpullVersion", index.flatpullVersion());
    root.put("createdAt", index.createdAt().toString());
    ObjectNode trace = root.putObject("trace");
    trace.put("recordedAt", index.trace().recordedAt().toString());
    index.trace().readyMillis().forEach(trace.putArray("readyMillis")::add);
    trace.put("pages", index.trace().pages());
    ObjectNode stats = root.putObject("statistics");
    stats.put("frames", index.frames().size());
    stats.put("extents", index.extentCount());
    stats.put("contentBytes", index.contentBytes());
    stats.put("storedBytes", index.storedBytes());
    stats.put("servedBytes", index.servedBytes());
    ArrayNode frames = root.putArray("frames");
    for (Frame f : index.frames()) {
      frames.addArray().add(f.layer()).add(f.offset()).add(f.length()).add(f.size());
    }
    ArrayNode layers = root.putArray("layers");
    for (LayerExtents l : index.layers()) {
      ObjectNode n = layers.addObject();
      n.put("digest", l.digest().toString());
      l.files().forEach(n.putArray("files")::add);
      ArrayNode extents = n.putArray("extents");
      for (Extent e : l.extents()) {
        extents.addArray().add(e.file()).add(e.fileOffset()).add(e.length()).add(e.frame()).add(e.frameOffset())
            .add(e.digest().toString());
      }
    }
    return root;
  }

  static RuntimeImageIndex fromJson(JsonNode root) throws RuntimeImageFormatException {
    Fields f = new Fields();
    if (root == null || !root.isObject()) {
      throw new RuntimeImageFormatException("index: not a JSON object");
    }
    if (!FORMAT.equals(root.path("format").asText())) {
      throw new RuntimeImageFormatException("index.format: '" + root.path("format").asText() + "', expected '"
          + FORMAT + "'");
    }
    long version = f.integer(root, "version", 1, Integer.MAX_VALUE);
    if (version != VERSION) {
      throw new RuntimeImageFormatException("index.version: " + version + " is not supported (this flatpull reads"
          + " version " + VERSION + ")");
    }
    Verification verify;
    try {
      verify = Verification.of(f.text(root, "verify"));
    } catch (IllegalArgumentException e) {
      throw new RuntimeImageFormatException("index.verify: " + e.getMessage());
    }
    ServiceVersion service;
    try {
      service = TraceFile.serviceFromJson("index", root.get("service"));
      Digest.parse(service.manifestDigest());
    } catch (TraceFormatException | IllegalArgumentException e) {
      throw new RuntimeImageFormatException("index.service: " + e.getMessage());
    }
    JsonNode t = f.object(root, "trace");
    List<Long> ready = new ArrayList<>();
    for (JsonNode n : f.array(t, "readyMillis")) {
      if (!n.isIntegralNumber() || n.asLong() < 0) {
        throw new RuntimeImageFormatException("index.trace.readyMillis: holds " + n + ", not a duration");
      }
      ready.add(n.asLong());
    }
    TraceSummary trace = new TraceSummary(f.instant(t, "recordedAt"), ready,
        f.integer(t, "pages", 0, Long.MAX_VALUE));
    JsonNode layerArray = f.array(root, "layers");
    JsonNode frameArray = f.array(root, "frames");
    List<Frame> frames = new ArrayList<>();
    long offset = 0;
    for (int i = 0; i < frameArray.size(); i++) {
      String where = "index.frames[" + i + "]";
      if (frameArray.get(i).size() != 4) {
        throw new RuntimeImageFormatException(where + ": not [layer, offset, length, size]");
      }
      long[] v = f.integers(frameArray.get(i), where, 4);
      if (v[0] < 0 || v[0] >= layerArray.size()) {
        throw new RuntimeImageFormatException(where + ": layer " + v[0] + " of " + layerArray.size());
      }
      if (v[1] != offset) {
        throw new RuntimeImageFormatException(where + ": starts at " + v[1] + ", but the frames before it end at "
            + offset + " (frames are contiguous)");
      }
      if (v[2] < 1 || v[2] > MAX_FRAME_BYTES + 1024 || v[3] < 1 || v[3] > MAX_FRAME_BYTES) {
        throw new RuntimeImageFormatException(where + ": length " + v[2] + " or size " + v[3] + " outside 1.."
            + MAX_FRAME_BYTES);
      }
      frames.add(new Frame((int) v[0], v[1], (int) v[2], (int) v[3]));
      offset += v[2];
    }
    List<LayerExtents> layers = new ArrayList<>();
    for (int i = 0; i < layerArray.size(); i++) {
      layers.add(layer(f, layerArray.get(i), "index.layers[" + i + "]", frames, verify));
    }
    return new RuntimeImageIndex(verify, service, f.text(root, "flatpullVersion"), f.instant(root, "createdAt"),
        trace, frames, layers);
  }

  private static LayerExtents layer(Fields f, JsonNode n, String where, List<Frame> frames, Verification verify)
      throws RuntimeImageFormatException {
    if (n == null || !n.isObject()) {
      throw new RuntimeImageFormatException(where + ": not an object");
    }
    Digest digest = f.digest(n, "digest", where);
    List<String> files = new ArrayList<>();
    for (JsonNode v : f.array(n, "files")) {
      if (!v.isTextual() || !v.asText().startsWith("/")) {
        throw new RuntimeImageFormatException(where + ".files: holds " + v + ", not an absolute path");
      }
      files.add(v.asText());
    }
    JsonNode arr = f.array(n, "extents");
    List<Extent> extents = new ArrayList<>(arr.size());
    for (int j = 0; j < arr.size(); j++) {
      String at = where + ".extents[" + j + "]";
      JsonNode e = arr.get(j);
      if (!e.isArray() || e.size() != 6 || !e.get(5).isTextual()) {
        throw new RuntimeImageFormatException(at + ": not [file, fileOffset, length, frame, frameOffset, digest]");
      }
      long[] v = f.integers(e, at, 5);
      if (v[0] < 0 || v[0] >= files.size()) {
        throw new RuntimeImageFormatException(at + ": file " + v[0] + " of " + files.size());
      }
      if (v[1] < 0 || v[2] < 1 || v[2] > MAX_FRAME_BYTES) {
        throw new RuntimeImageFormatException(at + ": file offset " + v[1] + " or length " + v[2] + " out of range");
      }
      if (v[3] < 0 || v[3] >= frames.size()) {
        throw new RuntimeImageFormatException(at + ": frame " + v[3] + " of " + frames.size());
      }
      Frame frame = frames.get((int) v[3]);
      if (v[4] < 0 || v[4] + v[2] > frame.size()) {
        throw new RuntimeImageFormatException(at + ": bytes " + v[4] + ".." + (v[4] + v[2]) + " of frame " + v[3]
            + ", which holds " + frame.size());
      }
      if (verify == Verification.RUNTIME_IMAGE && (v[1] % PAGE_SIZE != 0 || v[2] > PAGE_SIZE)) {
        throw new RuntimeImageFormatException(at + ": in page mode an extent is one page (offset " + v[1]
            + ", length " + v[2] + ")");
      }
      Digest d;
      try {
        d = Digest.parse(e.get(5).asText());
      } catch (IllegalArgumentException x) {
        throw new RuntimeImageFormatException(at + ": " + x.getMessage());
      }
      extents.add(new Extent((int) v[0], v[1], (int) v[2], (int) v[3], (int) v[4], d));
    }
    checkNoOverlap(where, files, extents);
    return new LayerExtents(digest, files, extents);
  }

  private static void checkNoOverlap(String where, List<String> files, List<Extent> extents)
      throws RuntimeImageFormatException {
    Map<Integer, List<Extent>> byFile = new HashMap<>();
    for (Extent e : extents) {
      byFile.computeIfAbsent(e.file(), k -> new ArrayList<>()).add(e);
    }
    for (Map.Entry<Integer, List<Extent>> entry : byFile.entrySet()) {
      List<Extent> sorted = new ArrayList<>(entry.getValue());
      sorted.sort(Comparator.comparingLong(Extent::fileOffset));
      for (int i = 1; i < sorted.size(); i++) {
        Extent a = sorted.get(i - 1);
        Extent b = sorted.get(i);
        if (b.fileOffset() < a.fileEnd()) {
          throw new RuntimeImageFormatException(where + ": extents [" + a.fileOffset() + ", " + a.fileEnd() + ") and ["
              + b.fileOffset() + ", " + b.fileEnd() + ") of " + files.get(entry.getKey()) + " overlap");
        }
      }
    }
  }

  /** Typed access to JSON fields, with errors that name the field. */
  private static final class Fields {
    JsonNode object(JsonNode n, String field) throws RuntimeImageFormatException {
      JsonNode v = n.get(field);
      if (v == null || !v.isObject()) {
        throw new RuntimeImageFormatException("index." + field + ": missing or not an object");
      }
      return v;
    }

    JsonNode array(JsonNode n, String field) throws RuntimeImageFormatException {
      JsonNode v = n.get(field);
      if (v == null || !v.isArray()) {
        throw new RuntimeImageFormatException("index." + field + ": missing or not an array");
      }
      return v;
    }

    String text(JsonNode n, String field) throws RuntimeImageFormatException {
      JsonNode v = n.get(field);
      if (v == null || !v.isTextual()) {
        throw new RuntimeImageFormatException("index." + field + ": missing or not a string");
      }
      return v.asText();
    }

    long integer(JsonNode n, String field, long min, long max) throws RuntimeImageFormatException {
      JsonNode v = n.get(field);
      if (v == null || !v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < min || v.asLong() > max) {
        throw new RuntimeImageFormatException("index." + field + ": missing, not an integer, or outside " + min
            + ".." + max + " (" + v + ")");
      }
      return v.asLong();
    }

    Instant instant(JsonNode n, String field) throws RuntimeImageFormatException {
      try {
        return Instant.parse(text(n, field));
      } catch (DateTimeParseException e) {
        throw new RuntimeImageFormatException("index." + field + ": not an instant: " + e.getParsedString());
      }
    }

    Digest digest(JsonNode n, String field, String where) throws RuntimeImageFormatException {
      JsonNode v = n.get(field);
      try {
        return Digest.parse(v == null ? "" : v.asText());
      } catch (IllegalArgumentException e) {
        throw new RuntimeImageFormatException(where + "." + field + ": " + e.getMessage());
      }
    }

    /** The first {@code count} elements of an array as whole numbers. */
    long[] integers(JsonNode arr, String where, int count) throws RuntimeImageFormatException {
      if (arr == null || !arr.isArray() || arr.size() < count) {
        throw new RuntimeImageFormatException(where + ": not an array of " + count + " integers");
      }
      long[] out = new long[count];
      for (int i = 0; i < count; i++) {
        JsonNode v = arr.get(i);
        if (!v.isIntegralNumber() || !v.canConvertToLong()) {
          throw new RuntimeImageFormatException(where + "[" + i + "]: " + v + " is not an integer");
        }
        out[i] = v.asLong();
      }
      return out;
    }
  }
}
