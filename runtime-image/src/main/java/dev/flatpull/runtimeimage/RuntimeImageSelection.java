package dev.flatpull.runtimeimage;

import dev.flatpull.config.RuntimeImageSettings;
import java.time.Instant;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;

/**
 * Which of an image's runtime images a node loads (docs/runtime-images.md, "Selection"). Only runtime images verified
 * the way the node trusts ({@code [runtime_image] verify}) are candidates: a node that verifies against the image
 * never loads one whose content only its own index vouches for. Of those, the one of the configured service key
 * ({@code [runtime_image] service}) if set, else the newest (by creation time, then by digest, so that two nodes
 * given the same listing choose the same one).
 *
 * @param chosen the runtime image to load, if any
 * @param reason why none was chosen, as a short metric label ({@code none_found}, {@code other_verification},
 *     {@code no_such_service}); empty when one was
 * @param detail a sentence for the log
 */
public record RuntimeImageSelection(Optional<RuntimeImageArtifact> chosen, Optional<String> reason, String detail) {
  private static final Comparator<RuntimeImageArtifact> NEWEST_FIRST = Comparator
      .comparing((RuntimeImageArtifact a) -> a.created().orElse(Instant.EPOCH)).reversed()
      .thenComparing(a -> a.digest().toString());

  /** Chooses among {@code listed}, the runtime images the registry lists for an image. */
  public static RuntimeImageSelection of(List<RuntimeImageArtifact> listed, RuntimeImageSettings settings) {
    if (listed.isEmpty()) {
      return none("none_found", "the image has no runtime image");
    }
    List<RuntimeImageArtifact> trusted = listed.stream()
        .filter(a -> a.verify().equals(Optional.of(settings.verify()))).sorted(NEWEST_FIRST).toList();
    if (trusted.isEmpty()) {
      return none("other_verification", listed.size() + " runtime image(s) listed, none verified as "
          + settings.verify().key() + " ([runtime_image] verify)");
    }
    if (settings.service().isPresent()) {
      String key = settings.service().get();
      Optional<RuntimeImageArtifact> match = trusted.stream().filter(a -> a.serviceKey().equals(key)).findFirst();
      return match.map(a -> new RuntimeImageSelection(Optional.of(a), Optional.<String>empty(),
              "service " + key + " ([runtime_image] service)"))
          .orElseGet(() -> none("no_such_service", "no runtime image of service " + key + " among " + trusted.size()));
    }
    RuntimeImageArtifact newest = trusted.get(0);
    return new RuntimeImageSelection(Optional.of(newest), Optional.empty(), trusted.size() == 1
        ? "the only one" : "the newest of " + trusted.size());
  }

  private static RuntimeImageSelection none(String reason, String detail) {
    return new RuntimeImageSelection(Optional.empty(), Optional.of(reason), detail);
  }
}
