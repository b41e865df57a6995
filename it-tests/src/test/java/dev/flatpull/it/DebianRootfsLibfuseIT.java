package dev.flatpull.it;

import dev.flatpull.config.FuseSettings;

/** {@link DebianRootfsIT} on libfuse's engine: both engines show a real root file system exactly. */
class DebianRootfsLibfuseIT extends DebianRootfsIT {
  @Override
  FuseSettings.Engine engine() {
    return FuseSettings.Engine.LIBFUSE;
  }
}
