package dev.flatpull.it;

/**
 * Pushes a sample image to a registry (used by bin/demo): {@code PushSampleImage HOST:PORT REPOSITORY TAG [jdk|python]},
 * the {@link TestImage} (default) or a Debian root file system with python3 ({@link DebianImage#pushPython}).
 */
public final class PushSampleImage {
  private PushSampleImage() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3 && args.length != 4) {
      System.err.println("usage: PushSampleImage HOST:PORT REPOSITORY TAG [jdk|python]");
      System.exit(2);
    }
    if (args.length == 4 && args[3].equals("python")) {
      System.out.println("pushed " + DebianImage.pushPython(args[0], args[1], args[2]));
      return;
    }
    TestImage image = TestImage.push(args[0], args[1], args[2]);
    System.out.println("pushed " + image.reference + ": " + image.files.size() + " files, lower layer "
        + image.lowerLayerSize + " bytes compressed");
  }
}
