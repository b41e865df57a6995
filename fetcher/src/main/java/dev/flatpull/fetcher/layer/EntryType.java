package dev.flatpull.fetcher.layer;

/** The kind of a layer entry, with the names eStargz and zstd:chunked TOCs use. */
public enum EntryType {
  DIR("dir"),
  REG("reg"),
  SYMLINK("symlink"),
  HARDLINK("hardlink"),
  CHAR("char"),
  BLOCK("block"),
  FIFO("fifo");

  // values() copies its array on every call, and a TOC's parse asks once per entry.
  private static final EntryType[] VALUES = values();
  private final String tocName;

  EntryType(String tocName) {
    this.tocName = tocName;
  }

  public String tocName() {
    return tocName;
  }

  /** The type for a TOC {@code type} value, or null when the value is not an entry type ({@code chunk} or unknown). */
  static EntryType fromToc(String name) {
    for (EntryType t : VALUES) {
      if (t.tocName.equals(name)) {
        return t;
      }
    }
    return null;
  }
}
