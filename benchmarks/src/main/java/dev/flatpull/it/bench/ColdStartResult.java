package dev.flatpull.it.bench;

import java.util.List;
import java.util.Map;

/**
 * One measured cold start of {@link ColdStartBenchmark}: times from the pull's start (milliseconds; -1 where the step
 * did not complete), what crossed the emulated link before readiness, and what the snapshotter's processes held.
 *
 * @param format how the image's layers were stored: {@code gzip} (the plain image), {@code flatpull} (eStargz by
 *     {@code flatpull convert}), {@code ctr-remote} (eStargz by {@code ctr-remote image convert}), {@code
 *     ctr-remote-opt} (by {@code ctr-remote image optimize} for the workload)
 * @param pullMillis the pull (0 for a warm start, which starts an image already on the node)
 * @param createMillis container creation (its root file system's snapshot and mounts)
 * @param startMillis from the task's start to readiness
 * @param readyMillis from the pull's start to readiness: the figure compared; -1 when readiness was not reached
 * @param daemonRss resident bytes of the snapshotter's daemon at readiness (-1: none, as for overlayfs)
 * @param managerRss resident bytes of flatpull's FUSE manager at readiness (-1: none)
 * @param peaks the most each process and their memory group held during the start (from the pull to readiness)
 * @param hitRatio of a runtime-image start: bytes served from the runtime image over those served from it or lazily (-1:
 *     not measured)
 * @param fallbacks of a runtime-image start: runtime images rejected (or parts of them), plus lookups that did not load
 *     one; of a lazy start, layers pulled whole instead (-1: not measured)
 * @param firstMount of a {@code lazy} start: the FUSE manager's TOC (fetch, verify, parse), tree and mount
 *     milliseconds for the image's layer on the freshly started manager; empty otherwise
 * @param laterMount the same for the same layer pulled again on the same manager after the image was removed
 * @param streamLeftMillis of a runtime-image start: how long its stream went on after the task started (0 when it was
 *     done before; -1: not measured), from the FUSE manager's log: the stream's end and the image's last mount, each
 *     after the image's first Prepare, with the pull's end taken as the last mount (so it errs short)
 * @param error why readiness was not reached; empty when it was
 */
public record ColdStartResult(int run, String image, String link, String mode, String format, long pullMillis,
    long createMillis, long startMillis, long readyMillis, long requests, long bytesDown, long connections,
    Map<String, Long> byKind, long daemonRss, long managerRss, Peaks peaks, double hitRatio, long fallbacks,
    List<Long> firstMount, List<Long> laterMount, long streamLeftMillis, String error) {

  /**
   * Peak memory during a start, bytes (-1: not measured): each process's peak resident set (VmHWM, reset before the
   * pull), and the peak of the memory group the snapshotter's processes ran in (memory.peak or v1's
   * max_usage_in_bytes, which count the page cache of files they wrote too), with the group's limit and the
   * processes it killed for want of memory.
   */
  public record Peaks(long daemon, long manager, long group, long groupLimit, long oomKills) {
    static final Peaks NONE = new Peaks(-1, -1, -1, -1, -1);
  }

  public boolean reachedReadiness() {
    return error.isEmpty() && readyMillis >= 0;
  }

  /** A start that did not complete, with what was measured up to the failure. */
  static ColdStartResult failed(int run, String image, String link, String mode, String format, String error) {
    return new ColdStartResult(run, image, link, mode, format, -1, -1, -1, -1, 0, 0, 0, Map.of(), -1, -1, Peaks.NONE, -1, -1,
        List.of(), List.of(), -1, error);
  }
}
