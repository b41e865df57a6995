/**
 * Traces of the pages a service reads from its image until it is ready: {@link dev.flatpull.trace.TraceRecorder}
 * taps the read path, {@link dev.flatpull.trace.TraceFile} stores a {@link dev.flatpull.trace.Trace}, and
 * {@code probe} decides when a service is ready.
 */
package dev.flatpull.trace;
