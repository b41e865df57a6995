package dev.flatpull.manager;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.core.Digest;
import dev.flatpull.pagecache.PageCache;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The manifests a node loaded runtime images for are remembered per repository, the latest first and at most 64, in
 * the page cache's named files: a new manager on the same cache directory knows them, and a damaged file is ignored.
 */
class RememberedSubjectsTest {
  @TempDir Path dir;

  private static Digest d(int i) {
    return Digest.sha256(("manifest " + i).getBytes(StandardCharsets.UTF_8));
  }

  private PageCache open() throws Exception {
    return PageCache.open(dir.resolve("cache"), FlatpullConfig.parse("t.toml", "").cache());
  }

  @Test
  void subjects_outliveTheManager_latestFirst_perRepository_atMost64() throws Exception {
    try (PageCache cache = open()) {
      RememberedSubjects subjects = new RememberedSubjects(cache.namedFiles());
      for (int i = 0; i < 70; i++) {
        subjects.remember("registry:5000/app", d(i));
      }
      subjects.remember("registry:5000/app", d(68));
      subjects.remember("registry:5000/other", d(1000));
    }
    try (PageCache cache = open()) {
      RememberedSubjects again = new RememberedSubjects(cache.namedFiles());
      List<Digest> want = new ArrayList<>(List.of(d(68), d(69)));
      for (int i = 67; want.size() < RememberedSubjects.MAX; i--) {
        want.add(d(i));
      }
      assertEquals(want, again.of("registry:5000/app"));
      assertEquals(List.of(d(1000)), again.of("registry:5000/other"));
      assertEquals(List.of(), again.of("registry:5000/never"));
    }
  }

  @Test
  void aDamagedFile_isIgnored_andWrittenAgain() throws Exception {
    try (PageCache cache = open()) {
      new RememberedSubjects(cache.namedFiles()).remember("r/app", d(1));
      Path file = cache.namedFiles().find(RememberedSubjects.fileName("r/app")).orElseThrow();
      Files.writeString(file, Files.readString(file).replace("sha256:", "sha256:zz"));
    }
    try (PageCache cache = open()) {
      RememberedSubjects damaged = new RememberedSubjects(cache.namedFiles());
      assertEquals(List.of(), damaged.of("r/app"));
      damaged.remember("r/app", d(2));
    }
    try (PageCache cache = open()) {
      assertEquals(List.of(d(2)), new RememberedSubjects(cache.namedFiles()).of("r/app"));
      Path file = cache.namedFiles().find(RememberedSubjects.fileName("r/app")).orElseThrow();
      assertTrue(Files.readString(file).startsWith("flatpull runtime-image subjects 1 r/app\n"));
    }
  }
}
