package dev.flatpull.pagecache;

/**
 * A snapshot of page-cache counters.
 *
 * @param memoryHits lookups served from memory
 * @param diskHits lookups served from disk (then promoted to memory)
 * @param misses lookups found in neither tier
 * @param loads loader calls made on a miss (single-flight: concurrent misses of one digest count once)
 * @param reservationHits lookups served by waiting for a producer's reservation
 * @param corruptDiscarded disk entries that failed verification and were deleted
 * @param evictions disk entries evicted for the size budget
 * @param diskEntries entries on disk now
 * @param diskBytes bytes on disk now
 */
public record CacheStats(
    long memoryHits, long diskHits, long misses, long loads, long reservationHits, long corruptDiscarded,
    long evictions, long diskEntries, long diskBytes) {}
