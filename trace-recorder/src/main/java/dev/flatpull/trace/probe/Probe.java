package dev.flatpull.trace.probe;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * A readiness probe, parsed from its spec:
 * <ul>
 *   <li>{@code http://HOST:PORT/PATH} (or https): a GET answers 2xx;
 *   <li>{@code tcp://HOST:PORT}: a connection is accepted;
 *   <li>{@code exit}: the container's command exits with status 0;
 *   <li>{@code exec:COMMAND}: {@code sh -c COMMAND}, run on the host, exits with status 0;
 *   <li>{@code log:REGEX}: a line of the container's stdout or stderr matches (find, not whole line).
 * </ul>
 * Each attempt is bounded by the probe interval (at least one second for network and exec probes).
 */
public sealed interface Probe {
  /** The spec as given; part of the service-version key. */
  String spec();

  /** One attempt: whether the service is ready by this probe's measure. */
  boolean check(ContainerView container, Duration attemptTimeout);

  static Probe parse(String spec) {
    if (spec.equals("exit")) {
      return new Exit();
    }
    if (spec.startsWith("http://") || spec.startsWith("https://")) {
      URI uri;
      try {
        uri = URI.create(spec);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("probe '" + spec + "': not a URL: " + e.getMessage());
      }
      if (uri.getHost() == null || uri.getPort() < 0) {
        throw new IllegalArgumentException("probe '" + spec + "': needs http://HOST:PORT/PATH");
      }
      return new Http(spec, uri);
    }
    if (spec.startsWith("tcp://")) {
      String hostPort = spec.substring(6);
      int colon = hostPort.lastIndexOf(':');
      try {
        if (colon <= 0) {
          throw new NumberFormatException();
        }
        int port = Integer.parseInt(hostPort.substring(colon + 1));
        if (port <= 0 || port > 65535) {
          throw new NumberFormatException();
        }
        return new Tcp(spec, hostPort.substring(0, colon), port);
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("probe '" + spec + "': needs tcp://HOST:PORT");
      }
    }
    if (spec.startsWith("exec:") && spec.length() > 5) {
      return new Exec(spec, spec.substring(5));
    }
    if (spec.startsWith("log:") && spec.length() > 4) {
      try {
        return new Log(spec, Pattern.compile(spec.substring(4)));
      } catch (PatternSyntaxException e) {
        throw new IllegalArgumentException("probe '" + spec + "': bad regular expression: " + e.getDescription());
      }
    }
    throw new IllegalArgumentException("probe '" + spec + "': expected http://HOST:PORT/PATH, tcp://HOST:PORT, exit,"
        + " exec:COMMAND or log:REGEX");
  }

  /** The container's command exits 0. */
  record Exit() implements Probe {
    @Override
    public String spec() {
      return "exit";
    }

    @Override
    public boolean check(ContainerView c, Duration attemptTimeout) {
      return c.exitStatus().isPresent() && c.exitStatus().getAsInt() == 0;
    }
  }

  record Http(String spec, URI uri) implements Probe {
    private static final HttpClient CLIENT = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

    @Override
    public boolean check(ContainerView c, Duration attemptTimeout) {
      try {
        int status = CLIENT.send(HttpRequest.newBuilder(uri).timeout(attemptTimeout).GET().build(),
            HttpResponse.BodyHandlers.discarding()).statusCode();
        return status >= 200 && status < 300;
      } catch (IOException e) {
        return false;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      }
    }
  }

  record Tcp(String spec, String host, int port) implements Probe {
    @Override
    public boolean check(ContainerView c, Duration attemptTimeout) {
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress(host, port), (int) Math.max(1, attemptTimeout.toMillis()));
        return true;
      } catch (IOException e) {
        return false;
      }
    }
  }

  record Exec(String spec, String command) implements Probe {
    @Override
    public boolean check(ContainerView c, Duration attemptTimeout) {
      try {
        Process p = new ProcessBuilder(List.of("sh", "-c", command)).redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        if (!p.waitFor(attemptTimeout.toMillis(), TimeUnit.MILLISECONDS)) {
          p.destroyForcibly();
          return false;
        }
        return p.exitValue() == 0;
      } catch (IOException e) {
        return false;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      }
    }
  }

  record Log(String spec, Pattern pattern) implements Probe {
    @Override
    public boolean check(ContainerView c, Duration attemptTimeout) {
      return c.outputLines().stream().anyMatch(l -> pattern.matcher(l).find());
    }
  }
}
