package dev.flatpull.it;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * Debian's skopeo, each copy with a blob-info cache of its own. As root, skopeo remembers in
 * {@code /var/lib/containers/cache} which compressed blobs it has seen for an uncompressed digest, and a later copy
 * reuses such a blob from the destination registry instead of compressing: skopeo 1.9 (containers/image 5.23) then
 * pushes a zstd:chunked blob without its TOC annotations, as a plain zstd layer. A copy here runs in a mount namespace
 * of its own with an empty cache over that directory, so it compresses what it is asked to, every time.
 */
public final class Skopeo {
  private static final String CACHE = "/var/lib/containers/cache";

  private Skopeo() {}

  /** {@code skopeo copy ARGS...}, failing with its output when it fails. */
  public static void copy(List<String> args, long timeoutSeconds) throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>(List.of("unshare", "--mount", "--propagation", "private", "sh", "-c",
        "mkdir -p " + CACHE + " && mount -t tmpfs flatpull-skopeo-cache " + CACHE + " && exec \"$@\"", "sh",
        Processes.require("skopeo").toString(), "copy"));
    cmd.addAll(args);
    Processes.run(cmd, timeoutSeconds).orThrow(cmd);
  }
}
