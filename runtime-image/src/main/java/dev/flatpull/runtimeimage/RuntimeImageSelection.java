package dev.flatpull.runtimeimage;

import dev.flatpull.config.RuntimeImageSettings;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;

/**
 * Which of an image's runtime images a node loads (docs/runtime-images.md, "Selection"). Only runtime images verified
 * the way the node trusts ({@code [runtime_image] verify}) are candidates: a node that verifies against the image
 * never loads one whose content only its own index vouches for. Of those, the one of the configured service key
 * ({@code [runtime_image] service}) if set, whoever pushed another later, else the newest (by creation time, then by
 * digest, so that two nodes given the same listing choose the same one). Every runtime image not chosen is kept with
 * the reason, so that the choice can be logged and counted.
 *
 * @param chosen the runtime image to load, if any
 * @param reason why none was chosen, as a short metric label ({@code none_found}, {@code other_verification},
 *     {@code no_such_service}); empty when one was
 * @param detail a sentence for the log
 * @param passedOver the listed runtime images not chosen, each with why
 */
public record RuntimeImageSelection(Optional<RuntimeImageArtifact> chosen, Optional<String> reason, String detail,
    List<PassedOver> passedOver) {
  /** Every reason a listed runtime image is passed over (bounded metric labels). */
  public static final List<String> PASSED_OVER_REASONS = List.of("other_verification", "other_service", "older");

  private static final Comparator<RuntimeImageArtifact> NEWEST_FIRST = Comparator
      .comparing((RuntimeImageArtifact a) -> a.created().orElse(Instant.EPOCH)).reversed()
      .thenComparing(a -> a.digest().toString());

  public RuntimeImageSelection {
    passedOver = List.copyOf(passedOver);
  }

  /** A listed runtime image that was not chosen, and why (one of {@link #PASSED_OVER_REASONS}). */
  public record PassedOver(RuntimeImageArtifact artifact, String reason) {}

  /** Chooses among {@code listed}, the runtime images the registry lists for an image. */
  public static RuntimeImageSelection of(List<RuntimeImageArtifact> listed, RuntimeImageSettings settings) {
    if (listed.isEmpty()) {
      return none("none_found", "the image has no runtime image", List.of());
    }
    List<PassedOver> passed = new ArrayList<>();
    List<RuntimeImageArtifact> trusted = new ArrayList<>();
    for (RuntimeImageArtifact a : listed.stream().sorted(NEWEST_FIRST).toList()) {
      if (a.verify().equals(Optional.of(settings.verify()))) {
        trusted.add(a);
      } else {
        passed.add(new PassedOver(a, "other_verification"));
      }
    }
    if (trusted.isEmpty()) {
      return none("other_verification", listed.size() + " runtime image(s) listed, none verified as "
          + settings.verify().key() + " ([runtime_image] verify)", passed);
    }
    Optional<RuntimeImageArtifact> chosen;
    String detail;
    if (settings.service().isPresent()) {
      String key = settings.service().get();
      chosen = trusted.stream().filter(a -> a.serviceKey().equals(key)).findFirst();
      detail = chosen.isPresent() ? "service " + key + " ([runtime_image] service)"
          : "no runtime image of service " + key + " among " + trusted.size();
    } else {
      chosen = Optional.of(trusted.get(0));
      detail = trusted.size() == 1 ? "the only one" : "the newest of " + trusted.size();
    }
    for (RuntimeImageArtifact a : trusted) {
      if (chosen.filter(a::equals).isEmpty()) {
        // Without a configured service, the newest wins whatever its service: the others are older.
        boolean older = settings.service().isEmpty() || a.serviceKey().equals(settings.service().get());
        passed.add(new PassedOver(a, older ? "older" : "other_service"));
      }
    }
    if (chosen.isEmpty()) {
      return none("no_such_service", detail, passed);
    }
    return new RuntimeImageSelection(chosen, Optional.empty(), detail, passed);
  }

  private static RuntimeImageSelection none(String reason, String detail, List<PassedOver> passed) {
    return new RuntimeImageSelection(Optional.empty(), Optional.of(reason), detail, passed);
  }

  /** The runtime images passed over, for the log: digest, service and reason of each. */
  public String passedOverDetail() {
    StringBuilder b = new StringBuilder();
    for (PassedOver p : passedOver) {
      b.append(b.length() == 0 ? "" : ", ").append(p.artifact().digest().shortHex()).append(" (service ")
          .append(p.artifact().serviceKey()).append(", ").append(p.reason()).append(')');
    }
    return b.toString();
  }
}
