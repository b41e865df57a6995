package dev.flatpull.it;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** A flatpull process's Prometheus endpoint on 127.0.0.1, read as samples keyed by name and tags. */
public final class MetricsEndpoint {
  private static final Pattern SAMPLE = Pattern.compile("^([a-z_]+)(\\{[^}]*\\})? ([0-9.eE+-]+|NaN)$");
  private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

  private final int port;

  public MetricsEndpoint(int port) {
    this.port = port;
  }

  public int port() {
    return port;
  }

  /** The exposition text. */
  public String text() throws IOException, InterruptedException {
    HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/metrics"))
        .timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofString());
    if (r.statusCode() != 200) {
      throw new IOException("GET /metrics on port " + port + ": HTTP " + r.statusCode());
    }
    return r.body();
  }

  /** Every sample, as {@code name{tags}} to value ({@code name} alone without tags). */
  public Map<String, Double> samples() throws IOException, InterruptedException {
    return parse(text());
  }

  /** Samples of exposition {@code text}, keyed as {@link #samples()} keys them. */
  public static Map<String, Double> parse(String text) {
    Map<String, Double> out = new TreeMap<>();
    for (String line : text.split("\n")) {
      Matcher m = SAMPLE.matcher(line.trim());
      if (m.matches()) {
        out.put(m.group(1) + (m.group(2) == null ? "" : m.group(2)), Double.parseDouble(m.group(3)));
      }
    }
    return out;
  }

  /** The sum of every sample of {@code name}, over its tags; 0 when absent. */
  public static double sum(Map<String, Double> samples, String name) {
    return samples.entrySet().stream().filter(e -> e.getKey().equals(name) || e.getKey().startsWith(name + "{"))
        .mapToDouble(Map.Entry::getValue).sum();
  }
}
