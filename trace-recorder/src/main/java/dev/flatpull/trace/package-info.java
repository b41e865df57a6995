/**
 * Reserved for recording of the pages a service reads until its readiness probe passes. The module exists so that the dependency structure of docs/architecture.md holds from the
 * start; it has no code until its part of the read path is built.
 */
package dev.flatpull.trace;
