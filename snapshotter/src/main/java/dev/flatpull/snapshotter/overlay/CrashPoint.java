package dev.flatpull.snapshotter.overlay;

/**
 * Named instants between the steps of an operation where a crash must leave a consistent store. Setting the system
 * property {@code flatpull.crashpoint} to a name makes the process halt there at once, as a kill -9 would, so that the
 * crash tests reach each instant deterministically instead of by chance.
 */
enum CrashPoint {
  /** Prepare: the new snapshot's directory exists under its temporary name; no metadata yet. */
  PREPARE_DIRECTORY_CREATED,
  /** Prepare: the directory has its final name; the metadata transaction has not committed. */
  PREPARE_DIRECTORY_PLACED,
  /** Commit: the usage is measured; the metadata transaction has not committed. */
  COMMIT_MEASURED,
  /** Remote prepare: the layer is mounted by the FUSE manager; no metadata records it yet. */
  REMOTE_MOUNTED,
  /** Remove: the metadata no longer lists the snapshot; its directory is still in place. */
  REMOVE_METADATA_COMMITTED,
  /** Remove: the directory is in the staging directory; its contents are not deleted. */
  REMOVE_STAGED;

  private static final String ARMED = System.getProperty("flatpull.crashpoint", "");

  void reach() {
    if (!ARMED.isEmpty() && ARMED.equals(name())) {
      System.err.println("flatpull: halting at crash point " + name());
      Runtime.getRuntime().halt(137);
    }
  }
}
