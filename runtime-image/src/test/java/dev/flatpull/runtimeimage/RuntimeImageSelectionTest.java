package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.RuntimeImageSettings;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.MediaTypes;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class RuntimeImageSelectionTest {
  private static RuntimeImageArtifact artifact(String key, String created, String verify) {
    Map<String, String> a = new java.util.HashMap<>(Map.of(RuntimeImageArtifact.SERVICE_KEY, key,
        RuntimeImageArtifact.VERIFY, verify));
    if (created != null) {
      a.put(RuntimeImageArtifact.CREATED, created);
    }
    return RuntimeImageArtifact.of(new Descriptor(MediaTypes.OCI_MANIFEST, Digest.sha256((key + created).getBytes()),
        100, a, Optional.empty(), Optional.of(RuntimeImageArtifact.ARTIFACT_TYPE)));
  }

  private static final RuntimeImageArtifact OLD = artifact("a", "2026-11-01T00:00:00Z", "image");
  private static final RuntimeImageArtifact NEW = artifact("b", "2026-12-01T00:00:00Z", "image");
  private static final RuntimeImageArtifact PAGES = artifact("c", "2026-12-02T00:00:00Z", "runtime-image");

  @Test
  void none_isLazyLoading_saidAsNoneFound() {
    RuntimeImageSelection s = RuntimeImageSelection.of(List.of(), RuntimeImageSettings.DEFAULTS);
    assertEquals(Optional.empty(), s.chosen());
    assertEquals(Optional.of("none_found"), s.reason());
  }

  @Test
  void several_theNewestVerifiedAsTheNodeTrusts_whateverTheListingOrder() {
    assertEquals(NEW, RuntimeImageSelection.of(List.of(OLD, PAGES, NEW), RuntimeImageSettings.DEFAULTS).chosen()
        .orElseThrow());
    assertEquals(NEW, RuntimeImageSelection.of(List.of(NEW, OLD, PAGES), RuntimeImageSettings.DEFAULTS).chosen()
        .orElseThrow());
    assertEquals(PAGES, RuntimeImageSelection.of(List.of(OLD, PAGES, NEW),
        RuntimeImageSettings.DEFAULTS.withVerify(Verification.RUNTIME_IMAGE)).chosen().orElseThrow());
  }

  @Test
  void onlyPageMode_onANodeVerifyingAgainstTheImage_isNotLoaded() {
    RuntimeImageSelection s = RuntimeImageSelection.of(List.of(PAGES), RuntimeImageSettings.DEFAULTS);
    assertEquals(Optional.of("other_verification"), s.reason());
  }

  @Test
  void configuredService_winsOverNewer_andAbsentOneIsSaid() {
    RuntimeImageSettings a = RuntimeImageSettings.DEFAULTS.withService(Optional.of("a"));
    assertEquals(OLD, RuntimeImageSelection.of(List.of(NEW, OLD), a).chosen().orElseThrow());
    RuntimeImageSettings z = RuntimeImageSettings.DEFAULTS.withService(Optional.of("z"));
    assertEquals(Optional.of("no_such_service"), RuntimeImageSelection.of(List.of(NEW, OLD), z).reason());
  }

  @Test
  void aLaterPushOfAnotherService_whileTheServiceIsConfigured_isPassedOver_andEveryOtherOneSaysWhy() {
    RuntimeImageArtifact mine = artifact("a", "2026-11-01T00:00:00Z", "image");
    RuntimeImageArtifact mineBefore = artifact("a", "2026-10-01T00:00:00Z", "image");
    RuntimeImageArtifact later = artifact("intruder", "2099-01-01T00:00:00Z", "image");
    RuntimeImageSelection s = RuntimeImageSelection.of(List.of(later, mineBefore, PAGES, mine),
        RuntimeImageSettings.DEFAULTS.withService(Optional.of("a")));
    assertEquals(mine, s.chosen().orElseThrow());
    assertEquals(List.of(new RuntimeImageSelection.PassedOver(PAGES, "other_verification"),
        new RuntimeImageSelection.PassedOver(later, "other_service"),
        new RuntimeImageSelection.PassedOver(mineBefore, "older")), s.passedOver());
    assertTrue(s.passedOverDetail().contains(later.digest().shortHex() + " (service intruder, other_service)"),
        s.passedOverDetail());
    // Without a configured service the newest wins, whoever pushed it: the node's operator chose that.
    RuntimeImageSelection newest = RuntimeImageSelection.of(List.of(later, mine), RuntimeImageSettings.DEFAULTS);
    assertEquals(later, newest.chosen().orElseThrow());
    assertEquals(List.of(new RuntimeImageSelection.PassedOver(mine, "older")), newest.passedOver());
  }

  @Test
  void sameCreationTime_brokenByDigest_soEveryNodeChoosesTheSame() {
    RuntimeImageArtifact x = artifact("x", "2026-12-01T00:00:00Z", "image");
    RuntimeImageArtifact y = artifact("y", "2026-12-01T00:00:00Z", "image");
    assertEquals(RuntimeImageSelection.of(List.of(x, y), RuntimeImageSettings.DEFAULTS).chosen(),
        RuntimeImageSelection.of(List.of(y, x), RuntimeImageSettings.DEFAULTS).chosen());
  }
}
