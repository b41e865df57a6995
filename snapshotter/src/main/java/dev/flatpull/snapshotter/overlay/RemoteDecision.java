package dev.flatpull.snapshotter.overlay;

import dev.flatpull.snapshotter.store.RemoteSource;
import java.util.Optional;

/**
 * Whether a Prepare becomes a remote snapshot.
 *
 * @param source the layer to serve lazily, when it can be
 * @param fallbackReason why a layer asked for remotely cannot be served lazily (a short metric label such as
 *     {@code plain_layer}), empty when no remote layer was asked for
 * @param detail a human-readable explanation for the log
 */
public record RemoteDecision(Optional<RemoteSource> source, Optional<String> fallbackReason, String detail) {
  public static RemoteDecision notRequested() {
    return new RemoteDecision(Optional.empty(), Optional.empty(), "no remote labels");
  }

  public static RemoteDecision serve(RemoteSource source) {
    return new RemoteDecision(Optional.of(source), Optional.empty(), "");
  }

  public static RemoteDecision fallback(String reason, String detail) {
    return new RemoteDecision(Optional.empty(), Optional.of(reason), detail);
  }
}
