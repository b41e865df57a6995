package dev.flatpull.fetcher.tar;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class LayerTarTest {
  /** Every entry of {@code tar} as "TYPE NAME MODE", and the regular files' contents. */
  private static List<String> read(byte[] tar, Map<String, byte[]> contents) throws IOException {
    TarReader r = new TarReader(new ByteArrayInputStream(tar));
    List<String> out = new ArrayList<>();
    for (TarHeader h = r.next(); h != null; h = r.next()) {
      out.add(h.type() + " " + h.name() + " " + Integer.toOctalString(h.mode()));
      if (h.isRegular()) {
        contents.put(h.name(), r.data().readAllBytes());
      }
    }
    return out;
  }

  @Test
  void eachParentDirectory_hasItsEntryOnce_beforeItsFirstFile() throws IOException {
    Map<String, byte[]> files = new LinkedHashMap<>();
    files.put("usr/lib/a.so", new byte[] {1});
    files.put("usr/lib/b.so", new byte[] {2, 2});
    files.put("usr/bin/tool", new byte[0]);
    files.put("top", new byte[] {3});
    Map<String, byte[]> back = new LinkedHashMap<>();

    List<String> entries = read(LayerTar.of(files), back);

    assertEquals(List.of("5 usr/ 755", "5 usr/lib/ 755", "0 usr/lib/a.so 644", "0 usr/lib/b.so 644", "5 usr/bin/ 755",
        "0 usr/bin/tool 644", "0 top 644"), entries);
    assertEquals(files.keySet(), back.keySet());
    files.forEach((name, content) -> assertArrayEquals(content, back.get(name), name));
  }

  @Test
  void aDirectoryGivenAsAnEntry_isNotListedAgain_forItsFiles() throws IOException {
    byte[] tar = new LayerTar()
        .entry(new TarHeader("etc", TarHeader.DIR, 0, 0700, 0, 0, "", "", Instant.EPOCH, "", 0, 0, Map.of()),
            new byte[0])
        .file("etc/shadow", new byte[] {9}, 0600)
        .bytes();

    assertEquals(List.of("5 etc/ 700", "0 etc/shadow 600"), read(tar, new LinkedHashMap<>()));
  }

  @Test
  void numberedFiles_takeTheirModes_andEndTheArchive() throws IOException {
    byte[] tar = LayerTar.numbered(new int[] {0644, 0600}, new byte[] {1}, new byte[] {2});
    Map<String, byte[]> back = new LinkedHashMap<>();

    assertEquals(List.of("0 f0 644", "0 f1 600"), read(tar, back));
    assertArrayEquals(new byte[] {2}, back.get("f1"));
    TarReader r = new TarReader(new ByteArrayInputStream(tar));
    r.next();
    r.next();
    assertNull(r.next());
  }
}
