package dev.flatpull.it;

/** {@link HostileLayerIT} on libfuse's engine: both refuse the same hostile layers and serve the deep one. */
class HostileLayerLibfuseIT extends HostileLayerIT {
  /**
   * Not again on this engine: {@code flatpull mount} opens a layer through the same {@code LayerServer.mount} as the
   * FUSE manager, whose refusal of every hostile layer on this engine {@link
   * #fuseManager_refusesEveryHostileLayer_andKeepsServingItsOtherLayers} checks; the catalogue's processes (a JVM
   * each, about a minute in all) would repeat HostileLayerIT's run of what is the command's own: its exit status and
   * message, and no mount left.
   */
  @Override
  void mountCommand_exitsWithTheErrorOnEveryHostileLayer_leavingNoMount() {}

  @Override
  String engineToml() {
    return "[fuse]\nengine = \"libfuse\"\n";
  }
}
