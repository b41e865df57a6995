package dev.flatpull.snapshotter.cli;

import dev.flatpull.config.FlatpullConfig;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.manager.api.v1.EmptyCacheResponse;
import dev.flatpull.manager.client.FuseManagerClient;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;

/** {@code flatpull cache}: the node's page cache. */
@Command(name = "cache", mixinStandardHelpOptions = true, description = "Work with the node's page cache.",
    subcommands = {CacheCommand.Empty.class})
final class CacheCommand implements Runnable {
  /** Accepts the shared options between {@code flatpull} and the subcommand, too. */
  @Mixin GlobalOptions global;

  @Override
  public void run() {
    new picocli.CommandLine(this).usage(System.out);
  }

  @Command(name = "empty", mixinStandardHelpOptions = true,
      description = {"Remove every entry of the node's page cache, in memory and on disk, so that the next start of "
          + "any image fetches its content again (a cold start on a running node, for benchmarks; or to reclaim the "
          + "disk). Through the running FUSE manager when there is one (served layers keep working and fetch what "
          + "they read next), else on the cache directory itself.",
          "The kernel's own page cache is separate: 'sync; echo 3 > /proc/sys/vm/drop_caches' drops it."})
  static final class Empty implements Callable<Integer> {
    @Mixin GlobalOptions global;

    @Override
    public Integer call() throws Exception {
      FlatpullConfig config = global.load();
      Path socket = config.snapshotter().fuseManagerSocket();
      if (Files.exists(socket)) {
        try (FuseManagerClient manager = new FuseManagerClient(socket, List.of(),
            config.root().resolve("fuse-manager.log"))) {
          EmptyCacheResponse r = emptyThrough(manager);
          if (r != null) {
            print("emptied the FUSE manager's page cache", r.getDiskEntries(), r.getDiskBytes(), r.getMemoryEntries());
            return 0;
          }
        }
      }
      Path dir = config.cache().directoryUnder(config.root());
      try (PageCache cache = PageCache.open(dir, config.cache())) {
        PageCache.Emptied e = cache.empty();
        print("no FUSE manager running; emptied the page cache in " + dir, e.diskEntries(), e.diskBytes(), e.memoryEntries());
      }
      return 0;
    }

    /** The manager's answer, or null when no manager answers on the socket (a stale socket file). */
    private static EmptyCacheResponse emptyThrough(FuseManagerClient manager) throws IOException {
      try {
        manager.status(5);
      } catch (IOException notRunning) {
        return null;
      }
      return manager.emptyCache();
    }

    private static void print(String what, long entries, long bytes, long memory) {
      System.out.printf(Locale.ROOT, "%s: %d entries (%.1f MiB) on disk, %d in memory%n", what, entries,
          bytes / 1048576.0, memory);
    }
  }
}
