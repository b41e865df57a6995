package dev.flatpull.fetcher.layer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.ByteRange;
import dev.flatpull.core.Digest;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/**
 * The flat table an index keeps its entries in gives back every field as written, finds every name, keeps a name
 * listed twice once (the later entry, in the earlier one's place, with only its own chunks), and reads the same from
 * its file form as from the heap.
 */
class EntryTableTest {
  private static Digest d(String s) {
    return Digest.sha256(s.getBytes(StandardCharsets.UTF_8));
  }

  private static LayerChunk chunk(long fileOffset, long size, long stored, String digest) {
    return new LayerChunk(fileOffset, size, new ByteRange(stored, 100), 0, d(digest));
  }

  private static LayerEntry file(String name, long size, List<LayerChunk> chunks) {
    return new LayerEntry(name, EntryType.REG, size, 0644, 0, 0, "root", "root", Instant.ofEpochSecond(1_700_000_000),
        null, 0, 0, Map.of(), Optional.of(d(name)), chunks);
  }

  /** Every field, compared one by one (byte arrays by content). */
  static void assertSameEntry(LayerEntry w, LayerEntry g) {
    String n = w.name();
    assertEquals(w.name(), g.name());
    assertEquals(w.type(), g.type(), n);
    assertEquals(w.size(), g.size(), n);
    assertEquals(w.mode(), g.mode(), n);
    assertEquals(w.uid(), g.uid(), n);
    assertEquals(w.gid(), g.gid(), n);
    assertEquals(w.userName(), g.userName(), n);
    assertEquals(w.groupName(), g.groupName(), n);
    assertEquals(w.modTime(), g.modTime(), n);
    assertEquals(w.linkName(), g.linkName(), n);
    assertEquals(w.devMajor(), g.devMajor(), n);
    assertEquals(w.devMinor(), g.devMinor(), n);
    assertEquals(w.xattrs().keySet(), g.xattrs().keySet(), n);
    w.xattrs().forEach((k, v) -> assertArrayEquals(v, g.xattrs().get(k), n + " " + k));
    assertEquals(w.digest(), g.digest(), n);
    assertEquals(w.chunks(), g.chunks(), n);
  }

  private static List<LayerEntry> unusual() {
    Map<String, byte[]> xattrs = new LinkedHashMap<>();
    xattrs.put("user.empty", new byte[0]);
    xattrs.put("security.capability", new byte[] {1, 0, 0, 2, (byte) 0xff});
    Digest sha512 = Digest.ofRaw("sha512", new byte[64]);
    return List.of(
        new LayerEntry("", EntryType.DIR, 0, 0755, 0, 0, null, null, Instant.EPOCH, null, 0, 0, Map.of(),
            Optional.empty(), List.of()),
        new LayerEntry("usr/share/dönér/ファイル", EntryType.REG, 300, 07777, 2_000_000_000, 65534, "ü", "",
            Instant.ofEpochSecond(-5, 999_999_999), null, 0, 0, xattrs, Optional.of(sha512),
            List.of(chunk(0, 100, 0, "a"), chunk(100, 100, 100, "b"),
                new LayerChunk(200, 100, new ByteRange(300, 0), 0, null))),
        new LayerEntry("dev/sda", EntryType.BLOCK, 0, 0660, 0, 6, "root", "disk", Instant.EPOCH, null, 8, 0, Map.of(),
            Optional.empty(), List.of()),
        new LayerEntry("link", EntryType.SYMLINK, 0, 0777, 0, 0, "root", "root", Instant.EPOCH, "usr/share/dönér",
            0, 0, Map.of(), Optional.empty(), List.of()),
        new LayerEntry("hard", EntryType.HARDLINK, 0, 0644, 0, 0, "root", "root", Instant.EPOCH,
            "usr/share/dönér/ファイル", 0, 0, Map.of(), Optional.empty(), List.of()));
  }

  @Test
  void everyField_comesBackAsWritten_fromTheHeapAndFromTheFileForm() throws Exception {
    List<LayerEntry> in = unusual();
    EntryTable heap = EntryTable.of(in);
    int length = heap.bytes().stream().mapToInt(ByteBuffer::remaining).sum();
    ByteBuffer file = ByteBuffer.allocateDirect(length);
    heap.bytes().forEach(file::put);
    EntryTable mapped = EntryTable.wrap(file.flip());
    for (EntryTable t : List.of(heap, mapped)) {
      assertEquals(in.size(), t.size());
      for (int i = 0; i < in.size(); i++) {
        assertSameEntry(in.get(i), t.entry(i));
        assertEquals(i, t.find(in.get(i).name()));
        assertEquals(in.get(i).type(), t.type(i));
        assertEquals(!in.get(i).xattrs().isEmpty(), t.hasXattrs(i));
      }
      assertEquals(3, t.chunkCount());
      assertEquals(300, t.contentSize());
      assertEquals(-1, t.find("usr/share/dönér/ファイ"));
      assertEquals(-1, t.find("nothing"));
    }
  }

  @Test
  void aNameListedTwice_isTheLaterEntry_inTheEarlierPlace_withOnlyItsChunks() throws Exception {
    List<LayerEntry> in = List.of(
        file("a", 200, List.of(chunk(0, 100, 0, "a0"), chunk(100, 100, 100, "a1"))),
        file("b", 100, List.of(chunk(0, 100, 200, "b0"))),
        file("a", 100, List.of(chunk(0, 100, 300, "a-again"))),
        file("c", 100, List.of(chunk(0, 100, 400, "c0"))));
    EntryTable t = EntryTable.of(in);
    assertEquals(3, t.size());
    assertEquals(List.of("a", "b", "c"), t.entries().stream().map(LayerEntry::name).toList());
    assertSameEntry(in.get(2), t.entry(0));
    assertSameEntry(in.get(1), t.entry(1));
    assertSameEntry(in.get(3), t.entry(2));
    assertEquals(3, t.chunkCount(), "the replaced entry's two chunks are gone");
    assertEquals(300, t.contentSize());
    assertEquals(List.of(d("b0"), d("a-again"), d("c0")), t.chunksStoredIn(0, Long.MAX_VALUE).stream()
        .map(LayerChunk::digest).toList());
    assertFalse(t.anyStoredChunk(d("a0")::equals));
    assertTrue(t.anyStoredChunk(d("c0")::equals));
  }

  @Test
  void namesOfOneHash_andManyMoreThanExpected_areAllFound() throws Exception {
    // "Aa" and "BB" have the same String hash, and so have every pair built from them.
    List<LayerEntry> in = new ArrayList<>();
    for (String a : List.of("Aa", "BB")) {
      for (String b : List.of("Aa", "BB")) {
        in.add(file(a + b, 0, List.of()));
      }
    }
    for (int i = 0; i < 5000; i++) {
      in.add(file("dir/f" + i, 0, List.of()));
    }
    EntryTable.Builder builder = new EntryTable.Builder(1);
    for (LayerEntry e : in) {
      builder.add(e);
    }
    EntryTable t = builder.build();
    assertEquals(in.size(), t.size());
    for (int i = 0; i < in.size(); i++) {
      assertEquals(i, t.find(in.get(i).name()), in.get(i).name());
    }
  }

  @Test
  void chunksListedOutOfBlobOrder_areGivenInBlobOrder() throws Exception {
    EntryTable t = EntryTable.of(List.of(
        file("late", 100, List.of(chunk(0, 100, 500, "late"))),
        file("early", 100, List.of(chunk(0, 100, 0, "early"))),
        file("middle", 100, List.of(chunk(0, 100, 200, "middle")))));
    assertEquals(List.of(d("early"), d("middle"), d("late")), t.chunksStoredIn(0, 1000).stream()
        .map(LayerChunk::digest).toList());
    assertEquals(List.of(d("middle")), t.chunksStoredIn(100, 400).stream().map(LayerChunk::digest).toList(),
        "from a start to an end, whole chunks only");
    assertNull(t.entry(0).linkName());
  }

  @Test
  void entriesHoldingASoughtDigest_areFoundInOrder_aDigestSharingOnlyItsFirstBytesIsNot() throws Exception {
    byte[] raw = d("x0").raw();
    byte[] near = raw.clone();
    near[31] ^= 1;
    Digest twin = Digest.ofRaw("sha256", near);
    List<LayerEntry> in = List.of(
        file("a", 200, List.of(chunk(0, 100, 0, "a0"), chunk(100, 100, 100, "shared"))),
        new LayerEntry("d", EntryType.DIR, 0, 0755, 0, 0, "root", "root", Instant.ofEpochSecond(1), null, 0, 0,
            Map.of(), Optional.empty(), List.of()),
        file("b", 100, List.of(new LayerChunk(0, 100, new ByteRange(200, 100), 0, twin))),
        file("c", 100, List.of(chunk(0, 100, 300, "shared"))),
        file("e", 100, List.of(new LayerChunk(0, 100, new ByteRange(400, 100), 0, Digest.ofRaw("sha256", raw)))));
    EntryTable heap = EntryTable.of(in);
    ByteBuffer file = ByteBuffer.allocateDirect(heap.bytes().stream().mapToInt(ByteBuffer::remaining).sum());
    heap.bytes().forEach(file::put);
    for (EntryTable t : List.of(heap, EntryTable.wrap(file.flip()))) {
      assertArrayEquals(new int[] {0, 3}, t.entriesHoldingAny(java.util.Set.of(d("shared"))));
      assertArrayEquals(new int[] {4}, t.entriesHoldingAny(java.util.Set.of(d("x0"))),
          "b's digest has x0's first 31 bytes, not its last");
      assertArrayEquals(new int[] {0, 2, 3}, t.entriesHoldingAny(java.util.Set.of(twin, d("a0"), d("shared"))));
      assertArrayEquals(new int[0], t.entriesHoldingAny(java.util.Set.of(d("nowhere"))));
      assertArrayEquals(new int[0], t.entriesHoldingAny(java.util.Set.of()));
    }
  }
}
