package dev.flatpull.fetcher.registry;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageIndex;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocument;
import dev.flatpull.fetcher.oci.OciDocuments;
import java.io.IOException;
import java.time.Duration;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.function.UnaryOperator;

/**
 * The referrers of a manifest (OCI distribution spec 1.1): artifacts whose {@code subject} is that manifest. Found
 * through the referrers API where the registry serves it, else through the referrers tag schema: an image index
 * tagged {@code ALG-HEX} (the subject's digest with ':' replaced) that clients keep up to date themselves.
 *
 * <p>The tag schema has no atomic update (registries such as distribution 2.8 offer no conditional PUT), so
 * {@link #update} reads, changes, writes, waits, and reads again: a writer whose change was overwritten by a
 * concurrent writer (one that read before this write and wrote after it) sees so and applies its change again to the
 * newer index. The wait after a write is at least twice this writer's own read-to-write time and never under
 * {@link #MIN_SETTLE}, so a concurrent writer of similar speed has landed its write by then. Thread-safe.
 */
public final class Referrers {
  /** The shortest wait between writing the tag-schema index and checking it. */
  public static final Duration MIN_SETTLE = Duration.ofMillis(150);
  private static final int MAX_ROUNDS = 12;

  private final RegistryClient client;
  private final Sleeper sleeper;
  private final InstantSource clock;
  private final Random jitter;

  public Referrers(RegistryClient client, Sleeper sleeper, InstantSource clock, Random jitter) {
    this.client = client;
    this.sleeper = sleeper;
    this.clock = clock;
    this.jitter = jitter;
  }

  /** What the registry offers, once asked. */
  public enum Source {
    /** The registry serves the referrers API. */
    API,
    /** The referrers tag schema (no API; an index under the {@code ALG-HEX} tag). */
    TAG_SCHEMA
  }

  /** Referrers and where they were found. */
  public record Listing(Source source, List<Descriptor> referrers) {
    public Listing {
      referrers = List.copyOf(referrers);
    }
  }

  /** The tag under which the tag schema keeps the referrers of {@code subject}. */
  public static String tagOf(Digest subject) {
    String hex = subject.hex();
    // Tags are at most 128 characters: the schema truncates the digest (sha512) to fit.
    String tag = subject.algorithm() + "-" + hex;
    return tag.length() > 128 ? tag.substring(0, 128) : tag;
  }

  /** The referrers of {@code subject} of the given artifact type (all when empty). */
  public Listing list(Digest subject, Optional<String> artifactType) throws IOException {
    Optional<ImageIndex> api = client.referrersApi(subject);
    Listing found = api.isPresent() ? new Listing(Source.API, api.get().manifests())
        : new Listing(Source.TAG_SCHEMA, readTagIndex(subject));
    if (artifactType.isEmpty()) {
      return found;
    }
    return new Listing(found.source(), found.referrers().stream()
        .filter(d -> d.artifactType().equals(artifactType)).toList());
  }

  /**
   * The referrers of {@code subject}, as {@link #list(Digest, Optional)} finds them, with the tag schema's index read
   * on {@code executor} while the API is asked: on a registry without the API (distribution 2.8) the answer comes one
   * round trip sooner, which a cold start waits for; on one with it, the tag read (a 404, usually) is the price.
   */
  public Listing listAtOnce(Digest subject, Optional<String> artifactType, java.util.concurrent.Executor executor)
      throws IOException {
    java.util.concurrent.CompletableFuture<List<Descriptor>> tag = java.util.concurrent.CompletableFuture.supplyAsync(
        () -> {
          try {
            return readTagIndex(subject);
          } catch (IOException e) {
            throw new java.util.concurrent.CompletionException(e);
          }
        }, executor);
    Optional<ImageIndex> api;
    try {
      api = client.referrersApi(subject);
    } catch (IOException | RuntimeException e) {
      tag.cancel(true);
      throw e;
    }
    Listing found;
    if (api.isPresent()) {
      // The tag's answer is not needed (nor its failure).
      tag.cancel(true);
      found = new Listing(Source.API, api.get().manifests());
    } else {
      found = new Listing(Source.TAG_SCHEMA, awaitTag(subject, tag));
    }
    return artifactType.isEmpty() ? found : new Listing(found.source(), found.referrers().stream()
        .filter(d -> d.artifactType().equals(artifactType)).toList());
  }

  private static List<Descriptor> awaitTag(Digest subject, java.util.concurrent.CompletableFuture<List<Descriptor>> tag)
      throws IOException {
    try {
      return tag.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("interrupted reading the referrers tag of " + subject);
    } catch (java.util.concurrent.ExecutionException e) {
      Throwable c = e.getCause() instanceof java.util.concurrent.CompletionException ce ? ce.getCause() : e.getCause();
      if (c instanceof IOException io) {
        throw io;
      }
      if (c instanceof RuntimeException r) {
        throw r;
      }
      throw new IOException("reading the referrers tag of " + subject + ": " + c, c);
    }
  }

  /**
   * Applies {@code change} to the tag-schema index of {@code subject} until a read after the write shows it applied:
   * {@code change} must be idempotent (applying it to its own result changes nothing), such as "add X" or "remove
   * those with key K". Returns the index as last read.
   *
   * @throws RegistryException when it did not hold after {@value #MAX_ROUNDS} rounds (writers that keep racing)
   */
  public List<Descriptor> update(Digest subject, UnaryOperator<List<Descriptor>> change)
      throws IOException, InterruptedException {
    long readStarted = clock.millis();
    List<Descriptor> current = readTagIndex(subject);
    for (int round = 1; round <= MAX_ROUNDS; round++) {
      List<Descriptor> wanted = change.apply(current);
      if (sameDigests(wanted, current)) {
        return current;
      }
      client.pushManifest(tagOf(subject), MediaTypes.OCI_INDEX, OciDocuments.writeIndex(wanted));
      long window = Math.max(0, clock.millis() - readStarted);
      long settle = Math.max(MIN_SETTLE.toMillis(), 2 * window);
      sleeper.sleep(Duration.ofMillis(settle + jitter.nextInt((int) Math.min(settle, 1000) + 1)));
      readStarted = clock.millis();
      current = readTagIndex(subject);
    }
    if (sameDigests(change.apply(current), current)) {
      return current;
    }
    throw new RegistryUnavailableException("the referrers index " + tagOf(subject) + " kept changing under "
        + MAX_ROUNDS + " rounds of concurrent updates", tagOf(subject), 0, null);
  }

  private static boolean sameDigests(List<Descriptor> a, List<Descriptor> b) {
    return a.stream().map(Descriptor::digest).toList().equals(b.stream().map(Descriptor::digest).toList());
  }

  /** The descriptors of the tag-schema index of {@code subject}; empty when there is none. */
  public List<Descriptor> readTagIndex(Digest subject) throws IOException {
    OciDocument doc;
    try {
      doc = client.fetchManifest(tagOf(subject));
    } catch (RegistryNotFoundException e) {
      return List.of();
    }
    if (!(doc instanceof ImageIndex index)) {
      throw new RegistryProtocolException("tag " + tagOf(subject) + " holds a manifest, not a referrers index",
          tagOf(subject), 200, null);
    }
    return new ArrayList<>(index.manifests());
  }
}
