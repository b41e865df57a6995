package dev.flatpull.trace;

/**
 * Consecutive 4 KiB pages of one file, first read one after another.
 *
 * @param file index into the layer's file table
 * @param firstPage the first page's index (file offset / 4096)
 * @param pages how many pages
 * @param firstAccessMicros when the first of them was first read, since the recording started
 * @param frequency in how many of the merged recordings these pages were read (1 for a single recording)
 */
public record PageRun(int file, long firstPage, int pages, long firstAccessMicros, int frequency) {
  public PageRun {
    if (file < 0 || firstPage < 0 || pages <= 0 || firstAccessMicros < 0 || frequency <= 0) {
      throw new IllegalArgumentException("invalid page run: file " + file + ", first page " + firstPage + ", pages "
          + pages + ", at " + firstAccessMicros + " µs, frequency " + frequency);
    }
  }
}
