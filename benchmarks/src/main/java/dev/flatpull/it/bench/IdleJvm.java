package dev.flatpull.it.bench;

/**
 * A JVM that does nothing: the cold-start benchmark starts two, with flatpull's two processes' options and classpath,
 * for the floor their resident memory cannot go below (docs/benchmarks.md, the footprint's floor).
 */
public final class IdleJvm {
  private IdleJvm() {}

  public static void main(String[] args) throws InterruptedException {
    Thread.sleep(Long.MAX_VALUE);
  }
}
