package dev.flatpull.snapshotter.store;

/**
 * A snapshot request that cannot be done, with the reason containerd tells apart. The gRPC service maps each code to
 * the status containerd's errdefs expect, in one place.
 */
public final class SnapshotException extends Exception {
  private static final long serialVersionUID = 1L;

  /** Why a request failed, in containerd's terms. */
  public enum Code {
    NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, INVALID_ARGUMENT, UNAVAILABLE
  }

  private final Code code;

  public SnapshotException(Code code, String message) {
    super(message);
    this.code = code;
  }

  public SnapshotException(Code code, String message, Throwable cause) {
    super(message, cause);
    this.code = code;
  }

  public Code code() {
    return code;
  }

  public static SnapshotException notFound(String what) {
    return new SnapshotException(Code.NOT_FOUND, what);
  }

  public static SnapshotException alreadyExists(String what) {
    return new SnapshotException(Code.ALREADY_EXISTS, what);
  }

  public static SnapshotException failedPrecondition(String what) {
    return new SnapshotException(Code.FAILED_PRECONDITION, what);
  }

  public static SnapshotException invalidArgument(String what) {
    return new SnapshotException(Code.INVALID_ARGUMENT, what);
  }
}
