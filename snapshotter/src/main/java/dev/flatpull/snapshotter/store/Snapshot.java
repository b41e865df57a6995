package dev.flatpull.snapshotter.store;

import java.nio.file.Path;
import java.time.Instant;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * One snapshot's metadata row.
 *
 * @param id the store's number for it, which names its directory; never reused
 * @param name the key of an active snapshot or view, the name of a committed one
 * @param parent the parent's name, empty for none
 * @param usageBytes for committed snapshots, the size measured when committing
 * @param usageInodes for committed snapshots, the inodes counted when committing
 * @param remoteMount for a remote snapshot, the FUSE mount point that serves its layer
 * @param remote for a remote snapshot, where its layer comes from
 */
public record Snapshot(
    long id, String name, Optional<String> parent, Kind kind, Instant created, Instant updated,
    Map<String, String> labels, long usageBytes, long usageInodes, Optional<Path> remoteMount,
    Optional<RemoteSource> remote) {
  public Snapshot {
    Objects.requireNonNull(name);
    Objects.requireNonNull(parent);
    Objects.requireNonNull(kind);
    Objects.requireNonNull(created);
    Objects.requireNonNull(updated);
    labels = Map.copyOf(labels);
    Objects.requireNonNull(remoteMount);
    Objects.requireNonNull(remote);
  }

  public boolean isRemote() {
    return remoteMount.isPresent();
  }
}
