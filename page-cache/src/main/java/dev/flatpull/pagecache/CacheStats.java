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
 * @param diskWriteFailures disk writes that failed (the content stayed in memory only)
 * @param writeBehindWaits producers' stores that met a full write-behind queue: content for later waited for the
 *     writer, a start's producer (a runtime-image stream, a read's readahead) wrote its content itself
 * @param diskWritesSkipped readers' stores kept in memory only because the write-behind queue was full (a reader never
 *     waits for the disk)
 * @param writeBehindBytes bytes waiting for their disk write now
 */
public record CacheStats(
    long memoryHits, long diskHits, long misses, long loads, long reservationHits, long corruptDiscarded,
    long evictions, long diskEntries, long diskBytes, long diskWriteFailures, long writeBehindWaits,
    long diskWritesSkipped, long writeBehindBytes) {}
