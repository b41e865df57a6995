/**
 * Reserved for runtime images: the recorded start-up working set packed into one registry object, and its loader. The module exists so that the dependency structure of docs/architecture.md holds from the
 * start; it has no code until its part of the read path is built.
 */
package dev.flatpull.runtimeimage;
