package dev.flatpull.runtimeimage;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.flatpull.config.RuntimeImageSettings.Limits;
import dev.flatpull.config.RuntimeImageSettings.Verification;
import dev.flatpull.core.Digest;
import dev.flatpull.fetcher.layer.LayerIndex;
import dev.flatpull.pagecache.PageCache;
import dev.flatpull.pagecache.ProducerProgress;
import dev.flatpull.runtimeimage.RuntimeImageFormat.Layout;
import dev.flatpull.runtimeimage.RuntimeImageIndex.Extent;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;

/**
 * Every case of {@link RuntimeImageStreamEarlyTest} again, on a node whose page cache holds nothing (it just joined):
 * the blob's head and frames are one request, the frames held until the TOCs bind them. A node that holds content (the
 * incremental case) reads the head first as there.
 */
class RuntimeImageStreamAtOnceTest extends RuntimeImageStreamEarlyTest {
  @Override
  boolean nodeHoldsOtherContent() {
    return false;
  }

  @Override
  PageCache cache(String name) throws Exception {
    PageCache c = super.cache(name);
    // Once its directory is listed (empty) it is known to hold nothing; until then the stream reads the head first.
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (!c.holdsNothing() && System.nanoTime() < deadline) {
      Thread.sleep(1);
    }
    return c;
  }

  /** Head and frames in one response, before the TOCs are in. */
  @Override
  int freshNodeRequests() {
    return 1;
  }

  @Override
  @Test
  void theBlobIsRequestedBeforeTheTocsAreIn_andNothingIsReservedUntilTheyBindIt() throws Exception {
    PageCache cache = cache("at-once");
    assertTrue(cache.holdsNothing());
    Layout layout = RuntimeImageFormat.read(built.blob());
    AtomicBoolean in = new AtomicBoolean();
    AtomicBoolean askedBeforeTocs = new AtomicBoolean();
    AtomicBoolean reservedBeforeTocs = new AtomicBoolean();
    RuntimeImageStream.LayerIndexes late = new RuntimeImageStream.LayerIndexes() {
      @Override
      public LayerIndex await(Digest layer) throws java.io.IOException {
        if (!in.get()) {
          askedBeforeTocs.set(blobRequests().size() == 1);
          Extent first = layout.index().layers().get(0).extents().get(0);
          Optional<dev.flatpull.pagecache.Reservation> r = cache.reserve(first.digest());
          // Free to reserve: the stream reserved nothing before its TOCs were in.
          reservedBeforeTocs.set(r.isEmpty());
          r.ifPresent(dev.flatpull.pagecache.Reservation::abandon);
          in.set(true);
        }
        return tocs.get(layer);
      }

      @Override
      public boolean ready(Digest layer) {
        return in.get();
      }
    };
    RuntimeImageStream.Outcome o = new RuntimeImageStream(client, cache, new ProducerProgress(Duration.ofMillis(200)),
        (l, p, off, n, c) -> {}, Verification.IMAGE, Limits.DEFAULTS).load(artifact, image.manifest, late);
    assertTrue(askedBeforeTocs.get(), "the blob was asked for before the TOCs were in: " + registry.log);
    assertFalse(reservedBeforeTocs.get(), "nothing reserved before the TOCs bound the runtime image");
    assertEquals(Optional.empty(), o.failure(), o.detail());
    assertEquals(1, o.requests());
    assertEquals(List.of("bytes=0-" + (built.blob().length - 1)), blobRequests().stream()
        .map(r -> r.substring(r.indexOf("bytes="))).toList(), "head and frames at once");
    assertEquals(built.blob().length, registry.blobBytesSent.get());
    assertEquals(o.contents(), o.delivered());
    assertCacheHoldsTheImagesBytes(cache, true);
  }
}
