package dev.flatpull.fetcher.registry;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.UnaryOperator;
import mockwebserver3.Dispatcher;
import mockwebserver3.MockResponse;
import mockwebserver3.MockWebServer;
import mockwebserver3.RecordedRequest;
import okio.Buffer;

/**
 * The tests' registry: okhttp's {@link MockWebServer} answering with an {@link InMemoryRegistry} (the same reading of
 * the distribution API as the warm-up's), and what a test needs to make it misbehave or to see what it was asked:
 * responses scripted ahead of the registry's own (a reset, a 401, a wrong range), blobs altered when sent, held back,
 * or slowed tag reads, and a log of every request. Every module's tests use this one.
 */
public final class FakeRegistry extends Dispatcher implements AutoCloseable {
  public final InMemoryRegistry content;
  public final MockWebServer server = new MockWebServer();
  /** Every request, as "METHOD PATH[ RANGE]". */
  public final List<String> log = Collections.synchronizedList(new ArrayList<>());
  /** Body bytes sent for blob GETs. */
  public final AtomicLong blobBytesSent = new AtomicLong();
  /** Manifests pushed under a referrers tag ({@code sha256-...}). */
  public final AtomicInteger tagWrites = new AtomicInteger();
  /** Applied to a blob's bytes before a GET sends them (a truncation, a flipped byte); identity by default. */
  public volatile UnaryOperator<byte[]> blobFault = b -> b;
  /** Awaited before a blob GET answers (a held-back stream), when set. */
  public volatile CountDownLatch blobHold;
  /** How long a blob GET takes (to let concurrent requests pile up). */
  public volatile long blobDelayMillis;
  /** The most requests the registry was answering at once. */
  public final AtomicInteger peakInFlight = new AtomicInteger();
  private final AtomicInteger inFlight = new AtomicInteger();
  /**
   * When set, a read of a referrers tag counts it down and answers only once it is open (or after 5 s): with a count
   * of N, N concurrent writers all read the index before any of them can write it, so that they race.
   */
  public volatile CountDownLatch tagReadsMeet;
  /**
   * When set, a referrers-API request answers only once a referrers tag was read (or after 2 s): a client that asks
   * the two one after another pays the 2 s, one that asks them at once does not.
   */
  public volatile CountDownLatch apiAwaitsTagRead;
  /** Referrers-API answers that waited for a tag read in vain (it came only after them, or never). */
  public final AtomicInteger apiWaitedInVain = new AtomicInteger();
  private final Queue<MockResponse> script = new ConcurrentLinkedQueue<>();

  /** A registry with or without the referrers API of distribution 1.1, not yet started. */
  public FakeRegistry(boolean referrersApi) {
    this.content = new InMemoryRegistry(referrersApi, b -> blobFault.apply(b));
    server.setDispatcher(this);
  }

  /** Starts the server on 127.0.0.1. */
  public FakeRegistry start() throws IOException {
    server.start();
    return this;
  }

  /** {@code HOST:PORT}, the registry part of a reference. */
  public String address() {
    return server.getHostName() + ":" + server.getPort();
  }

  /** The next request is answered with {@code response} instead of the registry's answer; in order. */
  public void enqueue(MockResponse response) {
    script.add(response);
  }

  @Override
  public MockResponse dispatch(RecordedRequest request) throws InterruptedException {
    peakInFlight.accumulateAndGet(inFlight.incrementAndGet(), Math::max);
    try {
      return answer(request);
    } finally {
      inFlight.decrementAndGet();
    }
  }

  private MockResponse answer(RecordedRequest request) throws InterruptedException {
    String method = request.getMethod();
    String path = request.getUrl().encodedPath();
    String range = request.getHeaders().get("Range");
    log.add(method + " " + path + (range == null ? "" : " " + range));
    MockResponse scripted = script.poll();
    if (scripted != null) {
      return scripted;
    }
    boolean referrersTag = path.contains("/manifests/sha256-");
    if (referrersTag && method.equals("PUT")) {
      tagWrites.incrementAndGet();
    } else if (referrersTag) {
      CountDownLatch tagRead = apiAwaitsTagRead;
      if (tagRead != null) {
        tagRead.countDown();
      }
      CountDownLatch meet = tagReadsMeet;
      if (meet != null) {
        meet.countDown();
        meet.await(5, TimeUnit.SECONDS);
      }
    }
    if (path.contains("/referrers/")) {
      CountDownLatch tagRead = apiAwaitsTagRead;
      if (tagRead != null && !tagRead.await(2, TimeUnit.SECONDS)) {
        apiWaitedInVain.incrementAndGet();
      }
    }
    boolean blobGet = method.equals("GET") && path.contains("/blobs/") && !path.contains("/uploads/");
    if (blobGet && blobHold != null) {
      blobHold.await();
    }
    if (blobGet && blobDelayMillis > 0) {
      Thread.sleep(blobDelayMillis);
    }
    InMemoryRegistry.Answer a = content.answer(method, path, request.getUrl().queryParameter("digest"), range,
        request.getHeaders().get("Content-Type"), request.getBody() == null ? new byte[0]
            : request.getBody().toByteArray());
    if (blobGet) {
      blobBytesSent.addAndGet(a.body().length);
    }
    // The body first: it sets Content-Length, which a HEAD's answer then gives as the blob's.
    MockResponse.Builder r = new MockResponse.Builder().code(a.status()).body(new Buffer().write(a.body()));
    a.headers().forEach(r::setHeader);
    return r.build();
  }

  @Override
  public void close() {
    server.close();
  }
}
