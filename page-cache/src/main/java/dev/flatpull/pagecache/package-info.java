/**
 * Reserved for the host-wide, content-addressed cache of verified pages (memory tier over disk tier). The module exists so that the dependency structure of docs/architecture.md holds from the
 * start; it has no code until its part of the read path is built.
 */
package dev.flatpull.pagecache;
