package dev.flatpull.trace.probe;

import java.util.List;
import java.util.OptionalInt;

/** What probes may look at of the container being recorded. */
public interface ContainerView {
  /** The container's exit status once it has exited. */
  OptionalInt exitStatus();

  /** The lines the container has written to stdout and stderr so far. */
  List<String> outputLines();
}
