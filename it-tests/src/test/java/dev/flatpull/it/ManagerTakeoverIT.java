package dev.flatpull.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.core.Await;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * nginx serving files of its lazily pulled image to an HTTP client that never stops, while the FUSE manager under it
 * is killed ({@code kill -9}) or replaced on purpose ({@code flatpull replace-manager}): every request succeeds, some
 * delayed, and every file served equals the image's.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ManagerTakeoverIT {
  private static final Cleanup cleanup = new Cleanup();
  private static FlatpullDaemon flatpull;
  private static ContainerdServer containerd;
  private static String image;
  private static Path rootfs;
  /** Files nginx serves from the image's /usr, as paths under it, each compared with the root file system's. */
  private static List<String> files;
  private static int port;
  private static Path nginxConf;

  @BeforeAll
  static void start() throws Exception {
    Processes.require("runc");
    RegistryServer registry = cleanup.add(RegistryServer.start());
    rootfs = DebianImage.nginxRootfs();
    String plain = DebianImage.pushRootfs(rootfs, registry.address(), "it/nginx", "plain").toString();
    image = registry.address() + "/it/nginx:esgz";
    Cli.Run convert = Cli.inProcess("convert", "--plain-http", "--quiet", plain, image);
    assertEquals(0, convert.exitCode(), convert.stderr());
    files = servedFiles(rootfs.resolve("usr"));
    assertTrue(files.size() > 200, "files under /usr: " + files.size());
    // As users run it (default fetching, warm-ups on), but the managers' class-data archive trained at once.
    flatpull = cleanup.add(FlatpullDaemon.start("class_archive_after = \"0s\"", true, ""));
    containerd = cleanup.add(ContainerdServer.withFlatpull(flatpull.socket()));
    containerd.ctrOk("image", "rpull", "--plain-http", "--snapshotter", "flatpull", image);
    // Every manager started from now on maps it.
    flatpull.awaitClassArchive();
    port = Processes.freePort();
    nginxConf = Files.createTempFile("flatpull-it-nginx", ".conf");
    cleanup.add((AutoCloseable) () -> Files.deleteIfExists(nginxConf));
    Files.writeString(nginxConf, """
        worker_processes 2;
        daemon off;
        pid /tmp/nginx.pid;
        error_log /tmp/nginx-error.log;
        events {}
        http {
          access_log off;
          server {
            listen 127.0.0.1:%d;
            root /usr;
          }
        }
        """.formatted(port));
  }

  @AfterAll
  static void stop() throws Exception {
    cleanup.close();
  }

  @BeforeEach
  void startNginx() throws Exception {
    containerd.ctrOk("run", "-d", "--net-host", "--snapshotter", "flatpull", "--mount",
        "type=bind,src=" + nginxConf + ",dst=/etc/nginx/nginx.conf,options=rbind:ro", image, "web",
        "/usr/sbin/nginx");
  }

  @AfterEach
  void stopNginx() throws Exception {
    containerd.removeContainer("web");
  }

  @Test
  @Order(1)
  void aKilledManager_isTakenOver_andNoRequestFails() throws Exception {
    underLoad("a FUSE manager killed under nginx", () -> {
      long takenOver = logLines("took over serving");
      long before = flatpull.managerPid();
      Processes.run(List.of("kill", "-9", Long.toString(before)), 10).orThrow(List.of("kill"));
      Await.until(Duration.ofSeconds(60), () -> logLines("took over serving") > takenOver,
          () -> "a takeover of the layer's mount (see the log)");
      long after = flatpull.managerPid();
      assertNotEquals(before, after, "a new FUSE manager serves");
      assertTrue(Files.readString(Path.of("/proc", Long.toString(after), "cmdline")).contains("-XX:SharedArchiveFile="),
          "the new manager maps the class-data archive");
      // The layer's index from its kept file, not its TOC from the registry: a takeover needs no registry.
      String takeover = flatpull.log().lines().filter(l -> l.contains("took over serving")).reduce((a, b) -> b)
          .orElseThrow();
      assertTrue(takeover.contains("index read from its kept file"), takeover);
      // The daemon is settled once it has seen the new manager answer (it then watches that one's exit).
      Await.until(Duration.ofSeconds(60), () -> flatpull.log().contains("FUSE manager " + after + " is serving"),
          () -> "the daemon seeing FUSE manager " + after + " answer");
    });
  }

  @Test
  @Order(2)
  void aReplacedManager_handsOver_andNoRequestFails() throws Exception {
    underLoad("a FUSE manager replaced under nginx", () -> {
      long before = flatpull.managerPid();
      // As an operator runs it: the launcher, a process of its own.
      Cli.Run r = Cli.launcher("--config", flatpull.config().toString(), "replace-manager");
      assertEquals(0, r.exitCode(), r.stderr() + flatpull.log());
      String out = r.out();
      System.out.print(out);
      assertTrue(out.matches("(?s)FUSE manager " + before + " \\(version .*\\) replaced by \\d+ .*1 layer mounts"
          + " served\\s*"), out);
      long after = flatpull.managerPid();
      assertNotEquals(before, after, "a new FUSE manager serves");
      assertTrue(ProcessHandle.of(before).map(h -> !h.isAlive()).orElse(true), "the old FUSE manager exited");
      assertTrue(flatpull.log().contains("took over from FUSE manager " + before), flatpull.log());
      // The daemon goes on with the new manager: a new container on the image runs.
      Processes.Result run = containerd.ctrOk("run", "--rm", "--snapshotter", "flatpull", image, "after-replace",
          "/bin/cat", "/etc/debian_version");
      assertTrue(run.stdout().startsWith("12"), run.stdout());
    });
  }

  @Test
  @Order(3)
  void aManagerKilledAgainWhileItStarts_isReplacedAtOnce_andNoRequestFails() throws Exception {
    underLoad("a FUSE manager killed, and its replacement killed as it started, under nginx", () -> {
      long first = flatpull.managerPid();
      Processes.run(List.of("kill", "-9", Long.toString(first)), 10).orThrow(List.of("kill"));
      // nginx's next reads wait for a manager: none of them may fail while the second one dies too.
      Processes.dropCaches();
      long second = -1;
      for (int i = 0; i < 1000 && second <= 0; i++) {
        second = starting(first);
      }
      assertTrue(second > 0, "no FUSE manager started after " + first + " was killed");
      // Before it answers the daemon, which watches a manager's exit only from then on.
      assertTrue(!flatpull.log().contains("FUSE manager " + second + " is serving"), flatpull.log());
      long noticesBefore = promptNotices(flatpull.log());
      Processes.run(List.of("kill", "-9", Long.toString(second)), 10).orThrow(List.of("kill"));
      long killed = second;
      Await.until(Duration.ofSeconds(60), () -> {
        long now = flatpull.managerPid();
        return now > 0 && now != first && now != killed && flatpull.log().contains("FUSE manager " + now + " is serving");
      }, () -> "a third FUSE manager serving");
      // Found at once, not at the watchdog's next round: by the end of the second's connection to the device holder
      // when it was killed after making it, else by the daemon's own check, again soon.
      assertTrue(promptNotices(flatpull.log()) > noticesBefore, flatpull.log());
    });
  }

  /** The daemon's log lines that say it checks a manager before its watchdog's next round. */
  private static long promptNotices(String log) {
    return log.lines().filter(l -> l.contains("checking again in 500 ms")
        || l.contains("connection to the device holder ended; checking the manager")).count();
  }

  /** The pid of a FUSE manager process other than {@code not}, or -1. */
  private static long starting(long not) throws Exception {
    Processes.Result r = Processes.run(List.of("pgrep", "-f", "fuse-manager --config " + flatpull.config()), 10);
    return r.stdout().lines().mapToLong(Long::parseLong).filter(p -> p != not).findFirst().orElse(-1);
  }

  /** What disturbs the manager while nginx serves, half the files asked for once before. */
  @FunctionalInterface
  private interface Disturbance {
    void run() throws Exception;
  }

  /**
   * Runs {@code disturbance} while the client asks nginx for file after file; then, the kernel's caches dropped, every
   * file is asked for again; no request may have failed.
   */
  private static void underLoad(String what, Disturbance disturbance) throws Exception {
    Load load = Load.start(port);
    try {
      load.awaitRequests(files.size() / 2);
      disturbance.run();
      Processes.dropCaches();
      load.awaitRequests(load.requests() + files.size() + 10);
    } finally {
      load.stop();
    }
    load.assertNoneFailed(what);
  }

  private static long logLines(String text) throws IOException {
    return flatpull.log().lines().filter(l -> l.contains(text)).count();
  }

  /** Regular files under {@code usr}, as paths relative to it: some of each directory, small and large. */
  private static List<String> servedFiles(Path usr) throws IOException {
    try (Stream<Path> all = Files.walk(usr)) {
      List<String> regular = all.filter(p -> Files.isRegularFile(p, java.nio.file.LinkOption.NOFOLLOW_LINKS))
          .map(p -> usr.relativize(p).toString())
          .filter(p -> p.matches("[A-Za-z0-9._/+-]+"))
          .sorted().toList();
      List<String> out = new ArrayList<>();
      for (int i = 0; i < regular.size(); i += Math.max(1, regular.size() / 400)) {
        out.add(regular.get(i));
      }
      return out;
    }
  }

  /** An HTTP client asking nginx for every file in turn, comparing each answer with the root file system. */
  private static final class Load {
    private final HttpClient http = HttpClient.newHttpClient();
    private final List<String> failures = java.util.Collections.synchronizedList(new ArrayList<>());
    private final AtomicInteger requests = new AtomicInteger();
    private final AtomicLong slowest = new AtomicLong();
    private final AtomicBoolean stop = new AtomicBoolean();
    private final Thread thread;

    private Load(int port) {
      String base = "http://127.0.0.1:" + port + "/";
      thread = new Thread(() -> {
        for (int i = 0; !stop.get(); i++) {
          String f = files.get(i % files.size());
          long t0 = System.nanoTime();
          try {
            HttpResponse<byte[]> r = http.send(HttpRequest.newBuilder(URI.create(base + f))
                .timeout(Duration.ofSeconds(60)).build(), HttpResponse.BodyHandlers.ofByteArray());
            if (r.statusCode() != 200) {
              failures.add(f + ": status " + r.statusCode());
            } else if (!java.util.Arrays.equals(r.body(), Files.readAllBytes(rootfs.resolve("usr").resolve(f)))) {
              failures.add(f + ": other bytes than the image's (" + r.body().length + " bytes)");
            }
          } catch (IOException | InterruptedException e) {
            failures.add(f + ": " + e);
          }
          slowest.accumulateAndGet(System.nanoTime() - t0, Math::max);
          requests.incrementAndGet();
          try {
            // A steady client, not a flood: the integration tests beside this one share the machine's two cores.
            Thread.sleep(5);
          } catch (InterruptedException e) {
            return;
          }
        }
      }, "nginx-client");
    }

    static Load start(int port) throws Exception {
      // nginx answers once it has started in its container.
      HttpClient probe = HttpClient.newHttpClient();
      Await.until(Duration.ofSeconds(60), () -> {
        try {
          return probe.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/" + files.get(0)))
              .timeout(Duration.ofSeconds(5)).build(), HttpResponse.BodyHandlers.discarding()).statusCode() == 200;
        } catch (IOException e) {
          return false;
        }
      }, () -> "nginx answering on port " + port);
      Load l = new Load(port);
      l.thread.start();
      return l;
    }

    int requests() {
      return requests.get();
    }

    void awaitRequests(int n) throws Exception {
      Await.until(Duration.ofSeconds(180), () -> requests.get() >= n,
          () -> requests.get() + " of " + n + " requests answered; failures " + failures);
    }

    void stop() throws InterruptedException {
      stop.set(true);
      thread.join(120_000);
    }

    void assertNoneFailed(String what) throws Exception {
      assertEquals(List.of(), failures);
      String errors = containerd.ctrOk("task", "exec", "--exec-id", "errors", "web", "/bin/cat",
          "/tmp/nginx-error.log").stdout();
      assertTrue(!errors.contains("Input/output error") && !errors.contains("(5:")
          && !errors.contains("Transport endpoint"), errors);
      System.out.printf("%s: %d requests, none failed, the slowest %d ms%n", what, requests.get(),
          slowest.get() / 1_000_000);
    }
  }
}
