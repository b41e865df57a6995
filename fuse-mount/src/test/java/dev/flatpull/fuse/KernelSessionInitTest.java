package dev.flatpull.fuse;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

/** The negotiation a process taking over a mount is given: round-tripped, and refused when it is not one. */
class KernelSessionInitTest {
  private static final KernelSession.Init INIT = new KernelSession.Init(7, 45, 40,
      0x5fd73fffffbL, KernelSession.WANTED | KernelSession.PASSTHROUGH, 256, 128 << 10, true);

  @Test
  void roundTrips() throws IOException {
    assertEquals(INIT, KernelSession.Init.decode(INIT.encode()));
  }

  @Test
  void aTruncatedOrForeignOrImpossibleNegotiation_isRefused() {
    byte[] bytes = INIT.encode();
    assertThrows(IOException.class, () -> KernelSession.Init.decode(Arrays.copyOf(bytes, bytes.length - 1)));
    byte[] format = bytes.clone();
    format[0] = 9;
    assertThrows(IOException.class, () -> KernelSession.Init.decode(format));
    KernelSession.Init grantedUnoffered = new KernelSession.Init(7, 45, 40, KernelSession.WANTED,
        KernelSession.WANTED | KernelSession.PASSTHROUGH, 256, 128 << 10, true);
    assertThrows(IOException.class, () -> KernelSession.Init.decode(grantedUnoffered.encode()));
    KernelSession.Init newer = new KernelSession.Init(7, 45, KernelSession.OUR_MINOR + 1, INIT.offered(),
        INIT.granted(), 256, 128 << 10, true);
    assertThrows(IOException.class, () -> KernelSession.Init.decode(newer.encode()));
  }
}
