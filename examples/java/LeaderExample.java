// Acquire a leader_election lease, write through its fence, release it,
// and show that a write with the token of an ended period is refused with
// SQLSTATE LE001.  Plain JDBC (PostgreSQL's driver), no other library.
//
//   java -cp /usr/share/java/postgresql.jar:. LeaderExample JDBC_URL [KEY] [TABLE]
//
// TABLE (default example_jobs) must be protected by KEY (default
// example-key): see README.md.  Prints one line per step; exits 0 when
// every step did what it should.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

public class LeaderExample {
    private final Connection db;
    private final String key;
    private final String table;

    LeaderExample(Connection db, String key, String table) {
        this.db = db;
        this.key = key;
        this.table = table;
    }

    /** le_acquire: the fencing token of our new period; throws if someone else holds the lease. */
    long acquire(String owner, String ttl) throws SQLException {
        try (PreparedStatement st = db.prepareStatement(
                "SELECT acquired, fencing_token, holder FROM le_acquire(?, ?, ?::interval)")) {
            st.setString(1, key);
            st.setString(2, owner);
            st.setString(3, ttl);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                if (!rs.getBoolean("acquired"))
                    throw new IllegalStateException("lease " + key + " is held by " + rs.getString("holder"));
                return rs.getLong("fencing_token");
            }
        }
    }

    boolean release(String owner, long token) throws SQLException {
        try (PreparedStatement st = db.prepareStatement("SELECT le_release(?, ?, ?)")) {
            st.setString(1, key);
            st.setString(2, owner);
            st.setLong(3, token);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getBoolean(1);
            }
        }
    }

    /**
     * A fenced write: the token goes into the transaction (set_config, local),
     * the fence trigger compares it with the lease's.  False on LE001: our
     * period is over; stop working as leader, never retry with that token.
     */
    boolean fencedInsert(long token, String what) throws SQLException {
        db.setAutoCommit(false);
        try (PreparedStatement set = db.prepareStatement(
                "SELECT set_config('leader_election.fencing_token', ?, true)");
             PreparedStatement ins = db.prepareStatement(
                "INSERT INTO " + table + " (fencing_token, what) VALUES (?, ?)")) {
            set.setString(1, Long.toString(token));
            set.executeQuery().close();
            ins.setLong(1, token);
            ins.setString(2, what);
            ins.executeUpdate();
            db.commit();
            return true;
        } catch (SQLException e) {
            db.rollback();
            if ("LE001".equals(e.getSQLState()))
                return false;
            throw e;
        } finally {
            db.setAutoCommit(true);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: LeaderExample JDBC_URL [KEY] [TABLE]");
            System.exit(64);
        }
        String key = args.length > 1 ? args[1] : "example-key";
        String table = args.length > 2 ? args[2] : "example_jobs";
        try (Connection db = DriverManager.getConnection(args[0])) {
            LeaderExample ex = new LeaderExample(db, key, table);
            String me = "java-" + ProcessHandle.current().pid();
            long token = ex.acquire(me, "15 seconds");
            System.out.println("acquired token=" + token);
            if (!ex.fencedInsert(token, "work of the leader"))
                throw new IllegalStateException("own write refused");
            System.out.println("write ok token=" + token);
            System.out.println("released=" + ex.release(me, token));

            // Someone else leads now; our old token must not pass the fence.
            long next = ex.acquire(me + "-next", "15 seconds");
            System.out.println("next owner acquired token=" + next);
            boolean stale = ex.fencedInsert(token, "late write of the old leader");
            System.out.println(stale ? "stale write COMMITTED (fence broken)"
                    : "stale write refused: LE001 (token " + token + " < " + next + ")");
            ex.release(me + "-next", next);
            System.exit(stale ? 1 : 0);
        } catch (SQLException e) {
            System.err.println("error: " + e.getMessage() + " (SQLSTATE " + e.getSQLState() + ")");
            System.exit(1);
        }
    }
}
