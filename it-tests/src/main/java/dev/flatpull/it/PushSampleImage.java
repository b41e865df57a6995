package dev.flatpull.it;

/** Pushes the {@link TestImage} to a registry: {@code PushSampleImage HOST:PORT REPOSITORY TAG} (used by bin/demo). */
public final class PushSampleImage {
  private PushSampleImage() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: PushSampleImage HOST:PORT REPOSITORY TAG");
      System.exit(2);
    }
    TestImage image = TestImage.push(args[0], args[1], args[2]);
    System.out.println("pushed " + image.reference + ": " + image.files.size() + " files, lower layer "
        + image.lowerLayerSize + " bytes compressed");
  }
}
