package dev.flatpull.fetcher.tar;

import java.time.Instant;
import java.util.Map;
import java.util.Objects;

/**
 * One tar entry's header, after PAX and GNU long-name records were applied. Extended attributes (PAX
 * {@code SCHILY.xattr.*}) are kept as raw bytes: {@code security.capability} is binary.
 *
 * @param type the ustar type flag: {@code '0'} file, {@code '1'} hard link, {@code '2'} symlink, {@code '3'} char
 *     device, {@code '4'} block device, {@code '5'} directory, {@code '6'} FIFO
 */
public record TarHeader(
    String name, char type, long size, int mode, long uid, long gid, String userName, String groupName,
    Instant modTime, String linkName, int devMajor, int devMinor, Map<String, byte[]> xattrs) {
  public static final char REG = '0';
  public static final char HARDLINK = '1';
  public static final char SYMLINK = '2';
  public static final char CHAR = '3';
  public static final char BLOCK = '4';
  public static final char DIR = '5';
  public static final char FIFO = '6';

  public TarHeader {
    Objects.requireNonNull(name);
    Objects.requireNonNull(modTime);
    userName = userName == null ? "" : userName;
    groupName = groupName == null ? "" : groupName;
    linkName = linkName == null ? "" : linkName;
    xattrs = Map.copyOf(xattrs);
  }

  public static TarHeader regular(String name, long size, int mode, Instant modTime) {
    return new TarHeader(name, REG, size, mode, 0, 0, "", "", modTime, "", 0, 0, Map.of());
  }

  public boolean isRegular() {
    return type == REG;
  }

  /** The same header under another name with another size (e.g. a chunk-less rewrite). */
  public TarHeader withSize(long newSize) {
    return new TarHeader(name, type, newSize, mode, uid, gid, userName, groupName, modTime, linkName, devMajor, devMinor, xattrs);
  }
}
