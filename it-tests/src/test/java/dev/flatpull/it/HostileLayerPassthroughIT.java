package dev.flatpull.it;

/**
 * {@link HostileLayerIT} on the kernel engine with passthrough for files of every size: its mounts answer every open,
 * and refuse and serve exactly as without it.
 */
class HostileLayerPassthroughIT extends HostileLayerIT {
  @Override
  String engineToml() {
    return "[fuse]\npassthrough = true\npassthrough_min_bytes = 1\n";
  }
}
