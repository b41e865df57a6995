/**
 * Reserved for the jnr-fuse file system of one layer. The module exists so that the dependency structure of docs/architecture.md holds from the
 * start; it has no code until its part of the read path is built.
 */
package dev.flatpull.fuse;
