package dev.flatpull.it.bench;

import dev.flatpull.config.CacheSettings;
import dev.flatpull.config.FetchLimits;
import dev.flatpull.config.FuseSettings;
import dev.flatpull.fetcher.convert.InMemoryLayer;
import dev.flatpull.fetcher.layer.LazyLayer;
import dev.flatpull.fetcher.tar.LayerTar;
import dev.flatpull.fuse.BackingFiles;
import dev.flatpull.fuse.FuseEvents;
import dev.flatpull.fuse.LayerContentReader;
import dev.flatpull.fuse.LayerFileSystem;
import dev.flatpull.fuse.LayerMount;
import dev.flatpull.fuse.LayerTree;
import dev.flatpull.pagecache.PageCache;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import jnr.ffi.LibraryLoader;
import jnr.ffi.Memory;
import jnr.ffi.Pointer;

/**
 * The latency of single file-system operations through each FUSE engine, with every byte already in flatpull's page
 * cache and the kernel's caches dropped before each phase: what a second start on a node pays per operation. Beside
 * them, go-fuse's loopback file system (the FUSE library stargz-snapshotter is built on, from Debian's Go sources)
 * over the same files on local disk, and the local disk itself; for those, the files' pages are read back into the
 * kernel's cache after the drop, as flatpull's page cache holds its bytes.
 *
 * <p>Phases, each a median over single operations: lookup (the first stat of a name), getattr (statx with
 * AT_STATX_FORCE_SYNC, which makes FUSE ask its server), a 4 KiB read of a 4 KiB file (opened before the clock
 * starts), a 1 MiB read of a 64 MiB file read from start to end, and the open and close of a 4 KiB file whose name
 * is looked up.
 */
final class EngineLatency {
  private static final int FILES = 1000;
  private static final int SMALL = 4096;
  private static final int BIG = 64 << 20;
  private static final int ROUNDS = 3;
  private static final int AT_FDCWD = -100;
  private static final int AT_SYMLINK_NOFOLLOW = 0x100;
  private static final int AT_STATX_FORCE_SYNC = 0x2000;
  private static final int STATX_BASIC_STATS = 0x7ff;

  /** glibc's statx: Java has no call that makes FUSE ask for attributes it holds. */
  public interface Statx {
    int statx(int dirfd, String path, int flags, int mask, Pointer buf);
  }

  private EngineLatency() {}

  /** One target: a directory holding {@code f0}..{@code f1000}, and how its caches are refilled after a drop. */
  private record Target(String name, Path root, Path backing) {}

  static void run(Path dir, Path goFuseLoopback) throws Exception {
    Random random = new Random(7);
    byte[][] files = new byte[FILES + 1][];
    for (int i = 0; i < FILES; i++) {
      files[i] = new byte[SMALL];
      random.nextBytes(files[i]);
    }
    files[FILES] = new byte[BIG];
    random.nextBytes(files[FILES]);
    Path plain = Files.createDirectories(dir.resolve("plain"));
    for (int i = 0; i <= FILES; i++) {
      Files.write(plain.resolve("f" + i), files[i]);
    }
    Path layerDir = Files.createDirectories(dir.resolve("engine-layer"));
    InMemoryLayer layer = InMemoryLayer.estargz(LayerTar.numbered(files), layerDir);
    LazyLayer lazy = new LazyLayer(layer.index(FetchLimits.DEFAULTS), layer.reader(), 64 << 10);
    Statx statx = LibraryLoader.create(Statx.class).load("c");
    List<AutoCloseable> open = new ArrayList<>();
    try (PageCache cache = PageCache.open(dir.resolve("engine-cache"), CacheSettings.DEFAULTS)) {
      List<Target> targets = new ArrayList<>();
      Map<String, LayerMount> mounts = new LinkedHashMap<>();
      // The default engine as configured by default, the same with passthrough (for files above the default minimum:
      // here the big file), and libfuse.
      java.util.concurrent.ExecutorService assembler = java.util.concurrent.Executors.newSingleThreadExecutor();
      open.add(assembler::shutdownNow);
      BackingFiles backing = new BackingFiles(cache, FuseSettings.DEFAULTS.passthroughMinBytes(), assembler,
          () -> true);
      for (String name : List.of("kernel", "kernel, passthrough", "libfuse")) {
        FuseSettings.Engine engine = name.startsWith("kernel") ? FuseSettings.Engine.KERNEL
            : FuseSettings.Engine.LIBFUSE;
        LayerMount m = LayerMount.mount(new LayerFileSystem(LayerTree.of(lazy.index()),
            new LayerContentReader(lazy, cache), FuseEvents.NONE), dir.resolve("engine-" + mounts.size()),
            engine, name.equals("kernel, passthrough") ? backing : BackingFiles.NONE, 0);
        open.add(m);
        mounts.put(name, m);
        targets.add(new Target("flatpull " + name, m.mountPoint(), null));
      }
      if (goFuseLoopback != null) {
        Path at = Files.createDirectories(dir.resolve("engine-go-fuse"));
        Process p = new ProcessBuilder(goFuseLoopback.toString(), at.toString(), plain.toString())
            .redirectErrorStream(true).redirectOutput(dir.resolve("go-fuse.log").toFile()).start();
        open.add(() -> {
          LayerMount.unmountLazily(at);
          p.destroy();
        });
        for (int i = 0; i < 200 && !LayerMount.isMounted(at); i++) {
          Thread.sleep(25);
        }
        if (!LayerMount.isMounted(at)) {
          throw new IOException("go-fuse's loopback did not mount: " + Files.readString(dir.resolve("go-fuse.log")));
        }
        targets.add(new Target("go-fuse loopback", at, plain));
      }
      targets.add(new Target("local disk", plain, plain));
      // Every byte into flatpull's page cache, through each mount.
      for (Target t : targets) {
        readAll(t.root);
      }
      // The big file read whole: its backing file is assembled for its next open.
      for (int i = 0; i < 400 && backing.stats().assembled() == 0; i++) {
        Thread.sleep(25);
      }
      System.out.println("backing files for passthrough: " + backing.stats());
      String[] phases = {"lookup", "getattr", "4 KiB read", "1 MiB read", "open+close"};
      Map<String, double[][]> samples = new LinkedHashMap<>();
      for (Target t : targets) {
        samples.put(t.name, new double[phases.length][]);
      }
      for (int round = 0; round < ROUNDS; round++) {
        for (Target t : targets) {
          double[][] got = measure(t, statx);
          if (round > 0) {
            double[][] all = samples.get(t.name);
            for (int ph = 0; ph < phases.length; ph++) {
              all[ph] = all[ph] == null ? got[ph] : concat(all[ph], got[ph]);
            }
          }
        }
      }
      System.out.printf(Locale.ROOT, "%nOperation latency, median microseconds (%d rounds after one to warm up; kernel"
          + " caches dropped before each phase):%n", ROUNDS - 1);
      System.out.printf(Locale.ROOT, "%-32s %10s %10s %12s %12s %12s%n", "", phases[0], phases[1], phases[2], phases[3],
          phases[4]);
      Map<String, double[]> medians = new LinkedHashMap<>();
      for (Target t : targets) {
        double[] m = new double[phases.length];
        for (int ph = 0; ph < phases.length; ph++) {
          m[ph] = median(samples.get(t.name)[ph]);
        }
        medians.put(t.name, m);
        System.out.printf(Locale.ROOT, "%-32s %10.1f %10.1f %12.1f %12.1f %12.1f%n", t.name, m[0], m[1], m[2], m[3],
            m[4]);
      }
      double[] go = medians.get("go-fuse loopback");
      if (go != null) {
        for (String name : mounts.keySet()) {
          double[] m = medians.get("flatpull " + name);
          System.out.printf(Locale.ROOT, "flatpull %s / go-fuse: lookup %.2fx, getattr %.2fx, 4 KiB read %.2fx,"
              + " 1 MiB read %.2fx, open+close %.2fx%n", name, m[0] / go[0], m[1] / go[1], m[2] / go[2], m[3] / go[3],
              m[4] / go[4]);
        }
      }
      for (Map.Entry<String, LayerMount> e : mounts.entrySet()) {
        if (!e.getValue().requests().isEmpty()) {
          System.out.println("requests the kernel sent to the " + e.getKey() + " engine: " + e.getValue().requests()
              + ", passthrough opens " + e.getValue().passthroughOpens());
        }
      }
    } finally {
      for (int i = open.size() - 1; i >= 0; i--) {
        open.get(i).close();
      }
    }
  }

  /** One round of every phase on {@code t}: microseconds per operation. */
  private static double[][] measure(Target t, Statx statx) throws Exception {
    double[][] out = new double[5][];
    Pointer buf = Memory.allocateDirect(jnr.ffi.Runtime.getRuntime(statx), 256);
    dropCaches(t);
    out[0] = new double[FILES];
    for (int i = 0; i < FILES; i++) {
      Path p = t.root.resolve("f" + i);
      long t0 = System.nanoTime();
      Files.readAttributes(p, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
      out[0][i] = (System.nanoTime() - t0) / 1e3;
    }
    dropCaches(t);
    out[1] = new double[FILES];
    for (int i = 0; i < FILES; i++) {
      String p = t.root.resolve("f" + i).toString();
      long t0 = System.nanoTime();
      if (statx.statx(AT_FDCWD, p, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, buf) != 0) {
        throw new IOException("statx " + p + " failed");
      }
      out[1][i] = (System.nanoTime() - t0) / 1e3;
    }
    dropCaches(t);
    out[2] = new double[FILES];
    ByteBuffer small = ByteBuffer.allocateDirect(SMALL);
    for (int i = 0; i < FILES; i++) {
      try (FileChannel ch = FileChannel.open(t.root.resolve("f" + i), StandardOpenOption.READ)) {
        small.clear();
        long t0 = System.nanoTime();
        int n = ch.read(small, 0);
        out[2][i] = (System.nanoTime() - t0) / 1e3;
        if (n != SMALL) {
          throw new IOException("short read of f" + i + " in " + t.name + ": " + n);
        }
      }
    }
    dropCaches(t);
    ByteBuffer mib = ByteBuffer.allocateDirect(1 << 20);
    out[3] = new double[BIG >> 20];
    try (FileChannel ch = FileChannel.open(t.root.resolve("f" + FILES), StandardOpenOption.READ)) {
      for (int i = 0; i < out[3].length; i++) {
        mib.clear();
        long t0 = System.nanoTime();
        while (mib.hasRemaining()) {
          if (ch.read(mib) < 0) {
            throw new IOException("the big file ended early in " + t.name);
          }
        }
        out[3][i] = (System.nanoTime() - t0) / 1e3;
      }
    }
    // Open and close of a file already looked up: no request at all where opens are left to the kernel, an OPEN and a
    // RELEASE where they are answered (passthrough).
    dropCaches(t);
    out[4] = new double[FILES];
    for (int i = 0; i < FILES; i++) {
      Path p = t.root.resolve("f" + i);
      Files.readAttributes(p, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
      long t0 = System.nanoTime();
      FileChannel.open(p, StandardOpenOption.READ).close();
      out[4][i] = (System.nanoTime() - t0) / 1e3;
    }
    return out;
  }

  /** Drops the kernel's page, dentry and inode caches; a target on local disk gets its files' pages back. */
  private static void dropCaches(Target t) throws IOException {
    Files.writeString(Path.of("/proc/sys/vm/drop_caches"), "3");
    if (t.backing != null) {
      readAll(t.backing);
    }
  }

  private static void readAll(Path root) throws IOException {
    for (int i = 0; i <= FILES; i++) {
      Files.readAllBytes(root.resolve("f" + i));
    }
  }

  private static double[] concat(double[] a, double[] b) {
    double[] c = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, c, a.length, b.length);
    return c;
  }

  private static double median(double[] v) {
    double[] s = v.clone();
    Arrays.sort(s);
    return s[s.length / 2];
  }
}
