package dev.flatpull.it;

/**
 * {@link HostileLayerIT} on the kernel engine with passthrough for files of every size: its mounts answer every open,
 * and refuse and serve exactly as without it.
 */
class HostileLayerPassthroughIT extends HostileLayerIT {
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
    return "[fuse]\npassthrough = true\npassthrough_min_bytes = 1\n";
  }
}
