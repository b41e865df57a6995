package dev.flatpull.it;

import dev.flatpull.config.FuseSettings;

/** {@link FuseMountIT} on libfuse's engine, which stays selectable and is what a node falls back to. */
class FuseMountLibfuseIT extends FuseMountIT {
  @Override
  FuseSettings.Engine engine() {
    return FuseSettings.Engine.LIBFUSE;
  }
}
