package dev.flatpull.fetcher.reference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

class ImageReferenceTest {
  @ParameterizedTest
  @CsvSource({
    "busybox, docker.io/library/busybox:latest",
    "library/busybox:1.36, docker.io/library/busybox:1.36",
    "docker.io/user/app, docker.io/user/app:latest",
    "index.docker.io/user/app:v1, docker.io/user/app:v1",
    "ghcr.io/org/team/app:v2, ghcr.io/org/team/app:v2",
    "localhost/app, localhost/app:latest",
    "127.0.0.1:5000/app:v1, 127.0.0.1:5000/app:v1",
    "127.0.0.1:5000/app@sha256:0000000000000000000000000000000000000000000000000000000000000000, 127.0.0.1:5000/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
  })
  void parse_normalisesLikeDocker(String in, String expected) {
    assertEquals(expected, ImageReference.parse(in).toString());
  }

  @ParameterizedTest
  @ValueSource(strings = {"", "UPPER/case", "app:", "app@sha256:short", "a//b", "registry:5000/", "app:bad tag"})
  void parse_invalid_isRefused(String in) {
    assertThrows(IllegalArgumentException.class, () -> ImageReference.parse(in));
  }

  @org.junit.jupiter.api.Test
  void manifestReference_prefersTheDigest() {
    ImageReference r = ImageReference.parse("h.io/a:v1@sha256:" + "1".repeat(64));
    assertEquals("sha256:" + "1".repeat(64), r.manifestReference());
  }
}
