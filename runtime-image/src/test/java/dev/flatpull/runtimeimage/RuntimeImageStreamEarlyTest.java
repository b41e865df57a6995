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
import dev.flatpull.runtimeimage.RuntimeImageIndex.LayerExtents;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;

/**
 * Every case of {@link RuntimeImageStreamTest} again, with the image's TOCs still on their way when the stream starts
 * (a cold start: the runtime image's lookup and the TOCs run at once): the blob is requested before them and its
 * first frames held until they bind it. What a refused runtime image may not do (reserve, cache, fetch past its bounds)
 * holds the same.
 */
class RuntimeImageStreamEarlyTest extends RuntimeImageStreamTest {
  /** TOCs that are in only once the stream awaits them: it reads as much of the blob early as it may. */
  @Override
  RuntimeImageStream.LayerIndexes indexes() {
    AtomicBoolean in = new AtomicBoolean();
    return new RuntimeImageStream.LayerIndexes() {
      @Override
      public LayerIndex await(Digest layer) {
        in.set(true);
        return tocs.get(layer);
      }

      @Override
      public boolean ready(Digest layer) {
        return in.get();
      }
    };
  }

  /** Its head (header and index), then its frames, both before the TOCs are in. */
  @Override
  int freshNodeRequests() {
    return 2;
  }

  @Test
  void theBlobIsRequestedBeforeTheTocsAreIn_andNothingIsReservedUntilTheyBindIt() throws Exception {
    PageCache cache = cache("before-tocs");
    Layout layout = RuntimeImageFormat.read(built.blob());
    AtomicBoolean blobAskedBeforeTocs = new AtomicBoolean();
    AtomicBoolean reservedBeforeTocs = new AtomicBoolean();
    RuntimeImageStream.LayerIndexes late = new RuntimeImageStream.LayerIndexes() {
      volatile boolean in;

      @Override
      public LayerIndex await(Digest layer) throws java.io.IOException {
        if (!in) {
          // The TOC arrives only once the blob was asked for (or never, and the test fails).
          long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
          while (blobRequests().size() < 2 && System.nanoTime() < deadline) {
            Thread.onSpinWait();
          }
          blobAskedBeforeTocs.set(blobRequests().size() == 2);
          Extent first = layout.index().layers().get(0).extents().get(0);
          Optional<dev.flatpull.pagecache.Reservation> r = cache.reserve(first.digest());
          // Free to reserve: the stream reserved nothing before its TOCs were in.
          reservedBeforeTocs.set(r.isEmpty());
          r.ifPresent(dev.flatpull.pagecache.Reservation::abandon);
          in = true;
        }
        return tocs.get(layer);
      }

      @Override
      public boolean ready(Digest layer) {
        return in;
      }
    };
    List<Digest> delivered = new ArrayList<>();
    RuntimeImageStream.Outcome o = new RuntimeImageStream(client, cache, new ProducerProgress(Duration.ofMillis(200)),
        (layer, path, offset, length, content) -> delivered.add(content), Verification.IMAGE, Limits.DEFAULTS)
        .load(artifact, image.manifest, late);
    assertTrue(blobAskedBeforeTocs.get(), "the blob's head and frames were asked for before the TOCs were in: "
        + registry.log);
    assertFalse(reservedBeforeTocs.get(), "nothing reserved before the TOCs bound the runtime image");
    assertEquals(Optional.empty(), o.failure(), o.detail());
    assertEquals(2, o.requests(), registry.log.toString());
    List<String> blobs = blobRequests();
    assertTrue(blobs.get(0).endsWith("bytes=0-" + (layout.dataStart() - 1)), "the head first: " + blobs);
    assertTrue(blobs.get(1).endsWith("bytes=" + layout.dataStart() + "-" + (built.blob().length - 1)),
        "then every frame: " + blobs);
    assertEquals(built.blob().length, registry.blobBytesSent.get());
    assertEquals(o.contents(), o.delivered());
    assertCacheHoldsTheImagesBytes(cache, true);
  }

  /**
   * Borrowing another version's runtime image: its index is asked for while this version's TOCs are still on their
   * way, in one request, and not again once they are in; what is then streamed is this version's bytes.
   */
  @Test
  void borrowing_readsTheOtherVersionsIndexBeforeTheTocsAreIn_once() throws Exception {
    TestImage next = nextVersion();
    java.util.Map<Digest, LayerIndex> nextTocs = next.indexes();
    AtomicBoolean headAskedBeforeTocs = new AtomicBoolean();
    RuntimeImageStream.LayerIndexes late = new RuntimeImageStream.LayerIndexes() {
      volatile boolean in;

      @Override
      public LayerIndex await(Digest layer) {
        if (!in) {
          headAskedBeforeTocs.set(blobRequests().size() == 1);
          in = true;
        }
        return nextTocs.get(layer);
      }

      @Override
      public boolean ready(Digest layer) {
        return in;
      }
    };
    PageCache cache = cache("borrowed-early");
    RuntimeImageStream stream = streamInto(cache, new ArrayList<>());

    RuntimeImageStream.Borrowable b = stream.readForBorrowing(artifact, image.manifest.digest(), next.manifest, late);

    assertTrue(headAskedBeforeTocs.get(), "the index was asked for before the TOCs were in: " + registry.log);
    assertEquals(1, b.head().requests(), registry.log.toString());
    RuntimeImageStream.Outcome o = stream.borrow(b, next.manifest, late);
    assertEquals(Optional.empty(), o.failure(), o.detail());
    Layout layout = RuntimeImageFormat.read(built.blob());
    assertEquals(1, blobRequests().stream().filter(r -> r.endsWith("bytes=0-" + (layout.dataStart() - 1))).count(),
        "the index once: " + blobRequests());
    assertCacheHoldsTheNextVersionsBytes(cache, b, next);
  }

  /** A blob longer than its index describes is refused once the TOCs are in; its frames are never asked for. */
  @Override
  @Test
  void blobLongerThanItsIndexPromises_isRefusedAfterTheIndex_theRestIsNeverRead() throws Exception {
    super.blobLongerThanItsIndexPromises_isRefusedAfterTheIndex_theRestIsNeverRead();
    assertEquals(1, blobRequests().size(), "only the head: " + blobRequests());
  }

  /** A frame holding more than its extents is refused; the frames are not asked for before the TOCs either. */
  @Override
  @Test
  void frameHoldingMoreThanItsExtents_isRefused() throws Exception {
    super.frameHoldingMoreThanItsExtents_isRefused();
    assertEquals(1, blobRequests().size(), "only the head: " + blobRequests());
  }

  /**
   * The index names content the node has: after the head, only the frames holding what the node lacks are fetched,
   * by range, once the TOCs are in.
   */
  @Override
  @Test
  void contentAlreadyOnTheNode_onlyTheFramesHoldingMissingContentAreFetched() throws Exception {
    Layout layout = RuntimeImageFormat.read(built.blob());
    PageCache cache = cache("incremental-early");
    List<int[]> frame0 = RuntimeImageDecoder.extentsByFrame(layout.index()).get(0);
    long inFrame0 = 0;
    java.util.Set<Digest> seen = new java.util.HashSet<>();
    for (int[] le : frame0) {
      LayerExtents l = layout.index().layers().get(le[0]);
      Extent e = l.extents().get(le[1]);
      byte[] truth = image.content(l.digest(), l.files().get(e.file()));
      cache.put(e.digest(), java.util.Arrays.copyOfRange(truth, (int) e.fileOffset(), (int) e.fileEnd()));
      if (seen.add(e.digest())) {
        inFrame0++;
      }
    }
    RuntimeImageStream.Outcome o = load(cache, new ArrayList<>());
    assertEquals(Optional.empty(), o.failure(), o.detail());
    assertTrue(o.incremental());
    assertEquals(inFrame0, o.reused());
    assertEquals(o.contents() - inFrame0, o.delivered());
    List<String> blobs = blobRequests();
    assertEquals(2, blobs.size(), "the head, then frames 1.. by range: " + blobs);
    assertTrue(blobs.get(0).endsWith("bytes=0-" + (layout.dataStart() - 1)), blobs.toString());
    assertTrue(blobs.get(1).endsWith("bytes=" + layout.frameStart(1) + "-" + (built.blob().length - 1)), blobs
        .toString());
    assertEquals(layout.dataStart() + built.blob().length - layout.frameStart(1), registry.blobBytesSent.get());
    assertCacheHoldsTheImagesBytes(cache, true);
  }
}
