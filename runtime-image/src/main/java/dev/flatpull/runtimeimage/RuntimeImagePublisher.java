package dev.flatpull.runtimeimage;

import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.oci.Descriptor;
import dev.flatpull.fetcher.oci.ImageManifest;
import dev.flatpull.fetcher.oci.MediaTypes;
import dev.flatpull.fetcher.oci.OciDocument;
import dev.flatpull.fetcher.oci.OciDocuments;
import dev.flatpull.fetcher.registry.Referrers;
import dev.flatpull.fetcher.registry.RegistryClient;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Predicate;

/**
 * Runtime images next to their image in the registry: each is an OCI artifact manifest of type
 * {@value RuntimeImageArtifact#ARTIFACT_TYPE} whose {@code subject} is the image manifest and whose one layer is the
 * blob, found through the referrers API or, on registries without it, the referrers tag schema. Several service
 * versions of one image coexist; pushing a service version again replaces its earlier runtime image. Thread-safe as
 * its {@link Referrers} is.
 */
public final class RuntimeImagePublisher {
  private static final java.util.logging.Logger LOG =
      java.util.logging.Logger.getLogger(RuntimeImagePublisher.class.getName());
  private final RegistryClient client;
  private final Referrers referrers;

  public RuntimeImagePublisher(RegistryClient client, Referrers referrers) {
    this.client = client;
    this.referrers = referrers;
  }

  /**
   * The publisher of {@code client}'s repository as every process wires it: referrers kept on the registry's API or
   * its tag schema, a tag update waiting on {@code clock} with real sleeps, jittered by a secure random (writers on
   * many nodes must not retry in step).
   */
  public static RuntimeImagePublisher of(RegistryClient client, java.time.InstantSource clock) {
    return new RuntimeImagePublisher(client, new Referrers(client, dev.flatpull.fetcher.registry.Sleeper.SYSTEM, clock,
        new java.security.SecureRandom()));
  }

  /** {@link #of(RegistryClient, java.time.InstantSource)} on the system clock. */
  public static RuntimeImagePublisher of(RegistryClient client) {
    return of(client, java.time.InstantSource.system());
  }

  /**
   * What a push did.
   *
   * @param manifest the artifact manifest's descriptor, as listed
   * @param source how the registry indexes referrers
   * @param replaced earlier runtime images of the same service version that were taken out of the listing
   */
  public record Published(Descriptor manifest, Referrers.Source source, List<RuntimeImageArtifact> replaced) {}

  /**
   * Pushes {@code blob} (a runtime image whose index is {@code index}) as a referrer of {@code subject}, the image
   * manifest's descriptor, and takes earlier runtime images of the same service version out of the listing.
   */
  public Published push(RuntimeImageIndex index, byte[] blob, Descriptor subject)
      throws IOException, InterruptedException {
    return push(index, blob, subject, Optional.empty());
  }

  /** The same, for a runtime image {@code derived} from an older version's, which its annotations then say. */
  public Published push(RuntimeImageIndex index, byte[] blob, Descriptor subject,
      Optional<RuntimeImageArtifact.Derivation> derived) throws IOException, InterruptedException {
    if (!subject.digest().equals(index.manifestDigest())) {
      throw new RuntimeImageMismatchException("the runtime image was built for manifest " + index.manifestDigest()
          + ", not for " + subject.digest());
    }
    long indexEnd = RuntimeImageFormat.HEADER_SIZE + (long) RuntimeImageFormat.indexLength(blob);
    Descriptor blobDescriptor = new Descriptor(RuntimeImageArtifact.BLOB_MEDIA_TYPE, Digest.sha256(blob), blob.length,
        Map.of(RuntimeImageArtifact.INDEX_END, Long.toString(indexEnd)));
    client.pushBlob(blobDescriptor, blob);
    client.pushBlob(OciDocuments.emptyConfig(), OciDocuments.EMPTY_JSON);
    Map<String, String> annotations = new java.util.LinkedHashMap<>(RuntimeImageArtifact.annotations(index,
        blobDescriptor));
    derived.ifPresent(d -> annotations.putAll(d.annotations()));
    Descriptor subjectOnly = new Descriptor(subject.mediaType(), subject.digest(), subject.size(), Map.of());
    byte[] manifest = OciDocuments.writeArtifactManifest(RuntimeImageArtifact.ARTIFACT_TYPE, List.of(blobDescriptor),
        subjectOnly, annotations);
    boolean api = client.pushReferrerManifest(MediaTypes.OCI_MANIFEST, manifest);
    Descriptor entry = new Descriptor(MediaTypes.OCI_MANIFEST, Digest.sha256(manifest), manifest.length, annotations)
        .withArtifactType(RuntimeImageArtifact.ARTIFACT_TYPE);
    String key = index.service().key();
    Predicate<Descriptor> earlier = d -> !d.digest().equals(entry.digest())
        && key.equals(d.annotations().get(RuntimeImageArtifact.SERVICE_KEY))
        && d.artifactType().equals(Optional.of(RuntimeImageArtifact.ARTIFACT_TYPE));
    List<RuntimeImageArtifact> replaced = new ArrayList<>();
    if (api) {
      for (Descriptor d : referrers.list(subject.digest(), Optional.of(RuntimeImageArtifact.ARTIFACT_TYPE))
          .referrers()) {
        if (earlier.test(d)) {
          replaced.add(RuntimeImageArtifact.of(d));
          client.deleteManifest(d.digest());
        }
      }
      return new Published(entry, Referrers.Source.API, replaced);
    }
    List<Descriptor> before = referrers.readTagIndex(subject.digest());
    before.stream().filter(earlier).map(RuntimeImageArtifact::of).forEach(replaced::add);
    referrers.update(subject.digest(), current -> {
      List<Descriptor> next = new ArrayList<>(current.stream().filter(earlier.negate()).toList());
      if (next.stream().noneMatch(d -> d.digest().equals(entry.digest()))) {
        next.add(entry);
      }
      return next;
    });
    for (RuntimeImageArtifact r : replaced) {
      client.deleteManifest(r.digest());
    }
    return new Published(entry, Referrers.Source.TAG_SCHEMA, replaced);
  }

  /** The runtime images of the image manifest {@code subject}, newest first. */
  public List<RuntimeImageArtifact> list(Digest subject) throws IOException {
    return newestFirst(referrers.list(subject, Optional.of(RuntimeImageArtifact.ARTIFACT_TYPE)));
  }

  /**
   * The same, with the referrers API and the tag schema asked at once ({@link Referrers#listAtOnce}): for a cold
   * start, which waits for the answer.
   */
  public List<RuntimeImageArtifact> list(Digest subject, java.util.concurrent.Executor executor) throws IOException {
    return newestFirst(referrers.listAtOnce(subject, Optional.of(RuntimeImageArtifact.ARTIFACT_TYPE), executor));
  }

  private static List<RuntimeImageArtifact> newestFirst(Referrers.Listing listing) {
    List<RuntimeImageArtifact> out = new ArrayList<>(listing.referrers().stream()
        .map(RuntimeImageArtifact::of).toList());
    out.sort((a, b) -> b.created().orElse(Instant.EPOCH).compareTo(a.created().orElse(Instant.EPOCH)));
    return out;
  }

  /** A runtime image of another image manifest, {@code subject}, of the same repository. */
  public record Related(RuntimeImageArtifact artifact, Digest subject) {}

  private static final java.util.regex.Pattern TAG_SCHEMA = java.util.regex.Pattern.compile("sha256-[0-9a-f]{64}");

  /**
   * Runtime images of other versions in this repository, newest first, at most {@code max}: of the manifests the
   * referrers tag schema names ({@code sha256-HEX} tags of the repository's first listing page) and of
   * {@code remembered} (manifests whose runtime images this node has loaded, which a registry with the referrers API
   * does not tag). At most {@code max} listings are read, at once on {@code executor}; one that fails is left out.
   */
  public List<Related> related(Digest exclude, java.util.Collection<Digest> remembered, int max,
      java.util.concurrent.Executor executor) throws IOException {
    java.util.LinkedHashSet<Digest> subjects = new java.util.LinkedHashSet<>(remembered);
    List<String> tags = client.listTags();
    // Newest tags are not first in a lexical listing: those of the tag schema are taken from the end, as a registry
    // that lists by name gives no better order, and the remembered ones first.
    for (int i = tags.size() - 1; i >= 0 && subjects.size() < 4 * max; i--) {
      if (TAG_SCHEMA.matcher(tags.get(i)).matches()) {
        subjects.add(Digest.parse("sha256:" + tags.get(i).substring(7)));
      }
    }
    subjects.remove(exclude);
    List<java.util.concurrent.CompletableFuture<List<Related>>> asked = new ArrayList<>();
    for (Digest subject : subjects.stream().limit(max).toList()) {
      asked.add(java.util.concurrent.CompletableFuture.supplyAsync(() -> {
        try {
          return list(subject).stream().map(a -> new Related(a, subject)).toList();
        } catch (IOException | RuntimeException e) {
          LOG.info("the runtime images of " + subject + " in " + client.repository() + " could not be listed: " + e);
          return List.<Related>of();
        }
      }, executor));
    }
    List<Related> out = new ArrayList<>();
    for (var f : asked) {
      out.addAll(f.join());
    }
    out.sort((a, b) -> b.artifact().created().orElse(Instant.EPOCH)
        .compareTo(a.artifact().created().orElse(Instant.EPOCH)));
    return out;
  }

  /** Takes the runtime images {@code which} selects out of the listing of {@code subject}; returns them. */
  public List<RuntimeImageArtifact> remove(Digest subject, Predicate<RuntimeImageArtifact> which)
      throws IOException, InterruptedException {
    Referrers.Listing listing = referrers.list(subject, Optional.of(RuntimeImageArtifact.ARTIFACT_TYPE));
    List<RuntimeImageArtifact> gone = listing.referrers().stream().map(RuntimeImageArtifact::of).filter(which)
        .toList();
    if (gone.isEmpty()) {
      return gone;
    }
    List<Digest> digests = gone.stream().map(RuntimeImageArtifact::digest).toList();
    if (listing.source() == Referrers.Source.TAG_SCHEMA) {
      referrers.update(subject, current -> current.stream().filter(d -> !digests.contains(d.digest())).toList());
    }
    for (Digest d : digests) {
      client.deleteManifest(d);
    }
    return gone;
  }

  /**
   * Fetches a listed runtime image's artifact manifest (verified by digest) and checks that it is a runtime image of
   * {@code image}: its subject must be that manifest.
   *
   * @return the descriptor of its blob
   * @throws RuntimeImageFormatException when the artifact is not a flatpull runtime image
   * @throws RuntimeImageMismatchException when it is a runtime image of another manifest
   */
  public static Descriptor blobOf(RegistryClient client, RuntimeImageArtifact artifact, Digest image)
      throws IOException {
    OciDocument doc = client.fetchManifest(artifact.digest().toString());
    if (!(doc instanceof ImageManifest m) || !m.artifactType().equals(Optional.of(RuntimeImageArtifact.ARTIFACT_TYPE))
        || m.layers().size() != 1 || !m.layers().get(0).mediaType().equals(RuntimeImageArtifact.BLOB_MEDIA_TYPE)) {
      throw new RuntimeImageFormatException("artifact " + artifact.digest() + " is not a flatpull runtime image"
          + " (artifactType " + RuntimeImageArtifact.ARTIFACT_TYPE + " with one layer of "
          + RuntimeImageArtifact.BLOB_MEDIA_TYPE + ")");
    }
    if (m.subject().isEmpty() || !m.subject().get().digest().equals(image)) {
      throw new RuntimeImageMismatchException("artifact " + artifact.digest() + ": its subject is "
          + m.subject().map(s -> s.digest().toString()).orElse("missing") + ", not the image manifest " + image);
    }
    return m.layers().get(0);
  }

  /**
   * The blob of a listed runtime image for a cold start: as its listing names it ({@link RuntimeImageArtifact#blob}),
   * without a request, else from its artifact manifest ({@link #blobOf}). The artifact manifest's checks are not
   * needed for safety: a blob that is no runtime image fails its header, one built for another image fails its
   * binding ({@link ImageBinding}), and every extent is verified against this image's TOC.
   */
  public static Descriptor blobToLoad(RegistryClient client, RuntimeImageArtifact artifact, Digest image)
      throws IOException {
    return artifact.blob().isPresent() ? artifact.blob().get() : blobOf(client, artifact, image);
  }

  /**
   * Fetches a listed runtime image: its artifact manifest (see {@link #blobOf}) and its blob (verified), downloaded
   * to {@code workDir}.
   *
   * @return the blob's bytes
   * @throws RuntimeImageMismatchException when the artifact is not a runtime image of {@code image}
   */
  public byte[] fetch(RuntimeImageArtifact artifact, Digest image, Path workDir) throws IOException {
    Descriptor blob = blobOf(client, artifact, image);
    Files.createDirectories(workDir);
    Path file = workDir.resolve(blob.digest().hex() + ".fpri");
    client.downloadBlob(blob, file);
    try {
      return Files.readAllBytes(file);
    } finally {
      Files.deleteIfExists(file);
    }
  }
}
