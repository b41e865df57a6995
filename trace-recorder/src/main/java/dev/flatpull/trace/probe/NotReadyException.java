package dev.flatpull.trace.probe;

/** The service did not become ready: the probes timed out, or the container exited first. */
public final class NotReadyException extends Exception {
  private static final long serialVersionUID = 1L;

  public NotReadyException(String message) {
    super(message);
  }
}
