package dev.flatpull.snapshotter.store;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Instant;
import java.time.InstantSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

/**
 * The snapshots' metadata, in SQLite with a write-ahead log and full synchronisation: a transaction is either wholly
 * on disk or not at all, whenever the process is killed. File effects (creating, renaming, unmounting directories) are
 * never part of a transaction; {@code OverlaySnapshotter} orders them around commits so that a crash leaves at most
 * orphaned directories, which the next start removes.
 *
 * <p>Not thread-safe: callers serialise access under their storage lock.
 */
public final class MetadataStore implements AutoCloseable {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final TypeReference<TreeMap<String, String>> LABELS = new TypeReference<>() {};
  /**
   * 2: creation and update times in nanoseconds since the epoch (1 kept milliseconds, which dated a snapshot before
   * the call that made it whenever both fell in one millisecond; containerd's suite checks the order).
   */
  private static final int SCHEMA_VERSION = 2;

  private final Connection db;
  private final InstantSource clock;

  private MetadataStore(Connection db, InstantSource clock) {
    this.db = db;
    this.clock = clock;
  }

  /** Opens (creating if needed) the store in {@code file}; {@code clock} dates the snapshots' creations and updates. */
  public static MetadataStore open(Path file, InstantSource clock) throws IOException {
    Files.createDirectories(file.toAbsolutePath().getParent());
    try {
      Connection c = DriverManager.getConnection("jdbc:sqlite:" + file.toAbsolutePath());
      try (Statement s = c.createStatement()) {
        s.execute("PRAGMA journal_mode=WAL");
        s.execute("PRAGMA synchronous=FULL");
        s.execute("PRAGMA foreign_keys=ON");
        s.execute("PRAGMA busy_timeout=10000");
        int version;
        try (ResultSet r = s.executeQuery("PRAGMA user_version")) {
          version = r.next() ? r.getInt(1) : 0;
        }
        if (version > SCHEMA_VERSION) {
          c.close();
          throw new IOException(file + ": metadata schema version " + version + " is newer than this flatpull ("
              + SCHEMA_VERSION + "); refusing to change it");
        }
        c.setAutoCommit(false);
        if (version == 1) {
          // Schema changes are transactional in SQLite: a kill leaves version 1 or version 2, never a mix.
          s.execute("ALTER TABLE snapshots RENAME COLUMN created_ms TO created_ns");
          s.execute("ALTER TABLE snapshots RENAME COLUMN updated_ms TO updated_ns");
          s.execute("UPDATE snapshots SET created_ns = created_ns * 1000000, updated_ns = updated_ns * 1000000");
        }
        s.execute("""
            CREATE TABLE IF NOT EXISTS snapshots (
              id INTEGER PRIMARY KEY AUTOINCREMENT,
              name TEXT NOT NULL UNIQUE,
              parent INTEGER REFERENCES snapshots(id) ON DELETE RESTRICT,
              kind TEXT NOT NULL,
              created_ns INTEGER NOT NULL,
              updated_ns INTEGER NOT NULL,
              labels TEXT NOT NULL,
              usage_bytes INTEGER NOT NULL DEFAULT 0,
              usage_inodes INTEGER NOT NULL DEFAULT 0,
              remote_mount TEXT,
              remote_ref TEXT,
              remote_descriptor TEXT)""");
        s.execute("PRAGMA user_version=" + SCHEMA_VERSION);
        c.commit();
      }
      c.setAutoCommit(true);
      return new MetadataStore(c, clock);
    } catch (SQLException e) {
      throw new IOException("cannot open the metadata store " + file + ": " + e.getMessage(), e);
    }
  }

  /** Work done inside one transaction. */
  @FunctionalInterface
  public interface Work<T> {
    T run(Transaction tx) throws SnapshotException, IOException;
  }

  /**
   * Runs {@code work} in one write transaction: committed when it returns, rolled back when it throws. Whatever file
   * effect {@code work} performs before returning happens before the commit.
   */
  public <T> T write(Work<T> work) throws SnapshotException, IOException {
    try {
      db.setAutoCommit(false);
      try {
        T result = work.run(new Transaction());
        db.commit();
        return result;
      } catch (SnapshotException | IOException | RuntimeException e) {
        db.rollback();
        throw e;
      } finally {
        db.setAutoCommit(true);
      }
    } catch (SQLException e) {
      throw new IOException("metadata store: " + e.getMessage(), e);
    }
  }

  /** Runs read-only {@code work}. */
  public <T> T read(Work<T> work) throws SnapshotException, IOException {
    return work.run(new Transaction());
  }

  @Override
  public void close() throws IOException {
    try {
      db.close();
    } catch (SQLException e) {
      throw new IOException("closing the metadata store: " + e.getMessage(), e);
    }
  }

  /** The operations on rows; valid only inside {@link #write} or {@link #read}. */
  public final class Transaction {
    private Transaction() {}

    public Optional<Snapshot> find(String name) throws IOException {
      List<Snapshot> found = query("WHERE s.name = ?", name);
      return found.isEmpty() ? Optional.empty() : Optional.of(found.get(0));
    }

    public Snapshot get(String name) throws SnapshotException, IOException {
      return find(name).orElseThrow(() -> SnapshotException.notFound("snapshot " + quote(name) + " does not exist"));
    }

    public List<Snapshot> all() throws IOException {
      return query("ORDER BY s.id");
    }

    /** The snapshot's ancestors, nearest first. */
    public List<Snapshot> ancestors(Snapshot s) throws SnapshotException, IOException {
      List<Snapshot> chain = new ArrayList<>();
      Optional<String> parent = s.parent();
      while (parent.isPresent()) {
        Snapshot p = get(parent.get());
        chain.add(p);
        parent = p.parent();
      }
      return chain;
    }

    public boolean hasChildren(Snapshot s) throws IOException {
      return count("SELECT COUNT(*) FROM snapshots WHERE parent = ?", s.id()) > 0;
    }

    /** Inserts a new snapshot; its name must be free and its parent (if any) must exist. */
    public Snapshot insert(String name, Optional<Snapshot> parent, Kind kind, Map<String, String> labels,
        Optional<Path> remoteMount, Optional<RemoteSource> remote) throws IOException {
      long now = now();
      try (PreparedStatement p = db.prepareStatement(
          "INSERT INTO snapshots (name, parent, kind, created_ns, updated_ns, labels, remote_mount, remote_ref,"
              + " remote_descriptor) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", Statement.RETURN_GENERATED_KEYS)) {
        p.setString(1, name);
        if (parent.isPresent()) {
          p.setLong(2, parent.get().id());
        } else {
          p.setNull(2, java.sql.Types.INTEGER);
        }
        p.setString(3, kind.name());
        p.setLong(4, now);
        p.setLong(5, now);
        p.setString(6, JSON.writeValueAsString(new TreeMap<>(labels)));
        p.setString(7, remoteMount.map(Path::toString).orElse(null));
        p.setString(8, remote.map(RemoteSource::imageRef).orElse(null));
        p.setString(9, remote.map(RemoteSource::descriptorJson).orElse(null));
        p.executeUpdate();
        return get(name);
      } catch (SQLException e) {
        throw sql(e);
      } catch (SnapshotException e) {
        throw new IllegalStateException("inserted row vanished", e);
      }
    }

    /**
     * Turns an active snapshot into a committed one named {@code name}, as containerd's own storage does: the
     * committed snapshot is created now (created = updated = the commit's time) and has exactly {@code labels}, none
     * inherited from the active one.
     */
    public Snapshot commit(Snapshot active, String name, Map<String, String> labels, long bytes, long inodes)
        throws IOException {
      long now = now();
      update("UPDATE snapshots SET name = ?, kind = ?, labels = ?, usage_bytes = ?, usage_inodes = ?, created_ns = ?,"
          + " updated_ns = ? WHERE id = ?", name, Kind.COMMITTED.name(), json(labels), bytes, inodes, now, now,
          active.id());
      return find(name).orElseThrow();
    }

    /** Replaces the labels and dates the update; nothing else changes. */
    public Snapshot setLabels(Snapshot s, Map<String, String> labels) throws IOException {
      update("UPDATE snapshots SET labels = ?, updated_ns = ? WHERE id = ?", json(labels), now(), s.id());
      return find(s.name()).orElseThrow();
    }

    public void delete(Snapshot s) throws IOException {
      update("DELETE FROM snapshots WHERE id = ?", s.id());
    }

    private void update(String sql, Object... args) throws IOException {
      try (PreparedStatement p = db.prepareStatement(sql)) {
        bind(p, args);
        p.executeUpdate();
      } catch (SQLException e) {
        throw sql(e);
      }
    }

    private long count(String sql, Object... args) throws IOException {
      try (PreparedStatement p = db.prepareStatement(sql)) {
        bind(p, args);
        try (ResultSet r = p.executeQuery()) {
          return r.next() ? r.getLong(1) : 0;
        }
      } catch (SQLException e) {
        throw sql(e);
      }
    }

    private List<Snapshot> query(String where, Object... args) throws IOException {
      String sql = "SELECT s.id, s.name, p.name, s.kind, s.created_ns, s.updated_ns, s.labels, s.usage_bytes,"
          + " s.usage_inodes, s.remote_mount, s.remote_ref, s.remote_descriptor FROM snapshots s"
          + " LEFT JOIN snapshots p ON p.id = s.parent " + where;
      try (PreparedStatement p = db.prepareStatement(sql)) {
        bind(p, args);
        List<Snapshot> out = new ArrayList<>();
        try (ResultSet r = p.executeQuery()) {
          while (r.next()) {
            String mount = r.getString(10);
            String ref = r.getString(11);
            String descriptor = r.getString(12);
            out.add(new Snapshot(r.getLong(1), r.getString(2), Optional.ofNullable(r.getString(3)),
                Kind.valueOf(r.getString(4)), Instant.ofEpochSecond(0, r.getLong(5)), Instant.ofEpochSecond(0, r.getLong(6)),
                JSON.readValue(r.getString(7), LABELS), r.getLong(8), r.getLong(9),
                Optional.ofNullable(mount).map(Path::of),
                ref == null ? Optional.empty() : Optional.of(new RemoteSource(ref, descriptor))));
          }
        }
        return out;
      } catch (SQLException e) {
        throw sql(e);
      }
    }
  }

  /** The clock's time in nanoseconds since the epoch (a long holds them until 2262). */
  private long now() {
    Instant t = clock.instant();
    return Math.addExact(Math.multiplyExact(t.getEpochSecond(), 1_000_000_000L), t.getNano());
  }

  private static void bind(PreparedStatement p, Object... args) throws SQLException {
    for (int i = 0; i < args.length; i++) {
      p.setObject(i + 1, args[i]);
    }
  }

  private static String json(Map<String, String> labels) throws IOException {
    return JSON.writeValueAsString(new TreeMap<>(labels));
  }

  private static IOException sql(SQLException e) {
    return new IOException("metadata store: " + e.getMessage(), e);
  }

  static String quote(String name) {
    return "\"" + name + "\"";
  }
}
