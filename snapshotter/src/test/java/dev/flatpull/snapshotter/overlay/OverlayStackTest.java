package dev.flatpull.snapshotter.overlay;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import org.junit.jupiter.api.Test;

class OverlayStackTest {
  @Test
  void lowerOptions_listTheLayersTopFirst_withoutAnIndex() {
    assertEquals(List.of("index=off", "lowerdir=/l/2:/l/1"), OverlayStack.lowerOptions(List.of("/l/2", "/l/1")));
  }

  @Test
  void lowerOptions_ofNoLayer_areRefused() {
    assertThrows(IllegalArgumentException.class, () -> OverlayStack.lowerOptions(List.of()));
  }
}
