package dev.flatpull.manager;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class RetirementTest {
  @Test
  void retiring_waitsForTheCallInProgress_andRefusesLaterOnes() throws Exception {
    Retirement r = new Retirement();
    assertTrue(r.enter());
    CountDownLatch asked = new CountDownLatch(1);
    CompletableFuture<Boolean> retired = CompletableFuture.supplyAsync(() -> {
      asked.countDown();
      try {
        return r.retire(Duration.ofSeconds(30));
      } catch (InterruptedException e) {
        throw new IllegalStateException(e);
      }
    });
    asked.await();
    // Refused as soon as retiring, while the first call still runs.
    for (int i = 0; i < 1000 && !r.retiring(); i++) {
      Thread.sleep(1);
    }
    assertTrue(r.retiring());
    assertFalse(r.enter(), "a call after Retire runs on the successor");
    assertFalse(retired.isDone(), "retired while a call was in progress");
    r.leave();
    assertTrue(retired.get(10, TimeUnit.SECONDS));
    assertFalse(r.enter());
  }

  @Test
  void aCallThatDoesNotFinish_endsThePatience() throws Exception {
    Retirement r = new Retirement();
    CountDownLatch entered = new CountDownLatch(1);
    CountDownLatch done = new CountDownLatch(1);
    // On a thread of its own, as gRPC runs calls: the read lock is held by that thread.
    Thread call = new Thread(() -> {
      r.enter();
      entered.countDown();
      try {
        done.await();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      r.leave();
    });
    call.start();
    entered.await();
    assertFalse(r.retire(Duration.ofMillis(50)));
    done.countDown();
    call.join();
  }
}
