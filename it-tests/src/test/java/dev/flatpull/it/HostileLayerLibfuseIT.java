package dev.flatpull.it;

/** {@link HostileLayerIT} on libfuse's engine: both refuse the same hostile layers and serve the deep one. */
class HostileLayerLibfuseIT extends HostileLayerIT {
  @Override
  String engineToml() {
    return "[fuse]\nengine = \"libfuse\"\n";
  }
}
