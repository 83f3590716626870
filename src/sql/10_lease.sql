-- ---------------------------------------------------------------------------
-- Leases: state, history, the lease API and the le_leases view.
-- The row format is owned by src/lease_rows.c, the token rule by
-- src/token.c; the C functions below are the only writers of these tables.
-- ---------------------------------------------------------------------------

CREATE SEQUENCE @extschema@.le_lease_id_seq AS bigint;
COMMENT ON SEQUENCE @extschema@.le_lease_id_seq IS
    'surrogate ids of lease rows; also the collision-free lock tag of each lease''s fence lock';

-- The low bits of every fencing token (see le_token_next in
-- src/token.c): a sequence is never rolled back, so a token that a
-- rolled-back grant returned is never issued again.  Tokens are 1 to 2^40 - 1
-- within a range of 2^40.
CREATE SEQUENCE @extschema@.le_token_seq AS bigint MAXVALUE 1099511627775 NO CYCLE;
COMMENT ON SEQUENCE @extschema@.le_token_seq IS
    'source of fencing tokens (the part below 2^40): every grant of a new ownership period takes a fresh value, never given out again, even when the granting transaction rolls back';

CREATE TABLE @extschema@.le_lease (
    lease_id        bigint      NOT NULL DEFAULT pg_catalog.nextval('le_lease_id_seq'::pg_catalog.regclass),
    lease_key       text        NOT NULL,
    holder          text,
    holder_role     name,
    fencing_token   bigint      NOT NULL DEFAULT 0,
    token_timeline  integer     NOT NULL DEFAULT 0,
    acquired_at     timestamptz,
    renewed_at      timestamptz,
    expires_at      timestamptz,
    transitions     bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    token_system_id bigint      NOT NULL DEFAULT 0,
    history_min_ended_at timestamptz,
    CONSTRAINT le_lease_pkey PRIMARY KEY (lease_id),
    CONSTRAINT le_lease_key_unique UNIQUE (lease_key),
    CONSTRAINT le_lease_token_nonnegative CHECK (fencing_token >= 0),
    CONSTRAINT le_lease_holder_consistent
        CHECK ((holder IS NULL) = (expires_at IS NULL) AND (holder IS NULL) = (holder_role IS NULL))
) WITH (fillfactor = 50);
ALTER SEQUENCE @extschema@.le_lease_id_seq OWNED BY @extschema@.le_lease.lease_id;
COMMENT ON TABLE @extschema@.le_lease IS
    'one row per lease key, never deleted (a deleted row would let its tokens start again); written only by the leader_election C functions';
COMMENT ON COLUMN @extschema@.le_lease.fencing_token IS
    'last token issued for this key (0: never granted); rises on every grant of a new ownership period, not by one: tokens come from le_token_seq, shared by all keys';
COMMENT ON COLUMN @extschema@.le_lease.token_timeline IS
    'WAL timeline that issued fencing_token; a grant on a newer timeline jumps the token above anything an older timeline could have issued';
COMMENT ON COLUMN @extschema@.le_lease.token_system_id IS
    'database system identifier of the cluster that issued fencing_token (0: never granted); a row restored into another cluster is no longer comparable by timeline, so its next grant jumps to a new range of tokens';
COMMENT ON COLUMN @extschema@.le_lease.history_min_ended_at IS
    'a grant looks for periods of this lease to prune in le_lease_history only once this is older than leader_election.history_retention: at or below the ended_at of every ended period (infinity: none has ended; NULL: unknown, the next grant looks)';
COMMENT ON COLUMN @extschema@.le_lease.holder IS
    'owner id of the current ownership period, NULL when released';

-- Renewals only change renewed_at and expires_at, grants only non-indexed
-- columns too: every update qualifies for HOT, and fillfactor 50 leaves the
-- page room for it, so constant renewal does not bloat the table or indexes.

-- A plain sequence, not an identity column: pg_dump restores the value of a
-- sequence marked with pg_extension_config_dump, not of an identity's.
CREATE SEQUENCE @extschema@.le_lease_history_id_seq AS bigint;
COMMENT ON SEQUENCE @extschema@.le_lease_history_id_seq IS 'ids of le_lease_history rows';

CREATE TABLE @extschema@.le_lease_history (
    history_id      bigint      NOT NULL DEFAULT pg_catalog.nextval('le_lease_history_id_seq'::pg_catalog.regclass),
    lease_id        bigint      NOT NULL,
    lease_key       text        NOT NULL,
    holder          text        NOT NULL,
    holder_role     name        NOT NULL,
    fencing_token   bigint      NOT NULL,
    acquired_at     timestamptz NOT NULL,
    ended_at        timestamptz,
    end_reason      text,
    -- Tokens never repeat within a lease: the key of a period, and the index
    -- both per-grant steps use (src/lease_rows.c): closing the open period
    -- (lease_id, fencing_token), and pruning a lease's periods older than
    -- the retention from its lowest token up (a lease's periods follow each
    -- other, so their ended_at rise with the token); each touches only the
    -- rows it changes however long the history is.  No column that closing a
    -- period changes is indexed, and fillfactor 80 leaves room on the page:
    -- the close is a HOT update.
    CONSTRAINT le_lease_history_pkey PRIMARY KEY (lease_id, fencing_token),
    CONSTRAINT le_lease_history_reason CHECK (end_reason IN ('released', 'expired', 'force_released'))
) WITH (fillfactor = 80);
ALTER SEQUENCE @extschema@.le_lease_history_id_seq OWNED BY @extschema@.le_lease_history.history_id;
COMMENT ON TABLE @extschema@.le_lease_history IS
    'one row per grant of a new fencing token: who held the lease, from when to when, and why it ended; rows whose period ended longer ago than leader_election.history_retention are pruned on the next grant of the same key';
COMMENT ON COLUMN @extschema@.le_lease_history.history_id IS
    'number of the grant across all leases, rising in the order grants were made (not indexed: the key of a period is lease_id and fencing_token)';
COMMENT ON COLUMN @extschema@.le_lease_history.end_reason IS
    'released (by its holder), expired (lapsed and then taken over by a new grant), force_released (le_force_release); NULL while the period lasts';
COMMENT ON COLUMN @extschema@.le_lease_history.ended_at IS
    'when the period ended: the release time, or for expired periods the expiry time that was in force';

-- Lease state must survive pg_dump/pg_restore, or tokens would start again.
SELECT pg_catalog.pg_extension_config_dump('le_lease', '');
SELECT pg_catalog.pg_extension_config_dump('le_lease_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('le_token_seq', '');
SELECT pg_catalog.pg_extension_config_dump('le_lease_history', '');
SELECT pg_catalog.pg_extension_config_dump('le_lease_history_id_seq', '');

REVOKE ALL ON @extschema@.le_lease, @extschema@.le_lease_history FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.le_lease_id_seq, @extschema@.le_lease_history_id_seq,
    @extschema@.le_token_seq FROM PUBLIC;

-- le_acquire, le_renew and le_release pin no search_path: their C code
-- looks up no object by name but the extension's own relations, in the
-- extension's schema (no SQL runs; rows are found by index scans of our
-- tables by oid), and a SET clause would add a GUC save and restore, 6% of
-- an ownership period's instructions, to every call.
-- sql/lease_privileges.sql runs them under a hijacked search_path.
-- le_acquire keeps OUT parameters: a named composite result type is
-- cheaper for the executor (3% of a cycle), but resolving it opens the
-- type's relation, so a call racing a DROP EXTENSION that then committed
-- failed with XX000 "could not open relation" (test/t/070_sweep.pl).
CREATE FUNCTION @extschema@.le_acquire(
    lease_key text,
    owner_id text,
    ttl interval DEFAULT '15 seconds',
    OUT acquired boolean,
    OUT fencing_token bigint,
    OUT holder text,
    OUT expires_at timestamptz,
    OUT new_period boolean)
RETURNS record
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'le_acquire';
COMMENT ON FUNCTION @extschema@.le_acquire(text, text, interval) IS
    'try to take the lease; returns the caller''s fencing token when granted (new_period true: a new, higher token; false: the valid holder again, same token and a new expiry), or the current holder and its expiry when refused (new_period NULL)';

CREATE FUNCTION @extschema@.le_renew(
    lease_key text,
    owner_id text,
    fencing_token bigint,
    ttl interval DEFAULT '15 seconds')
RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'le_renew';
COMMENT ON FUNCTION @extschema@.le_renew(text, text, bigint, interval) IS
    'extend a valid lease held by this owner, role and token; returns the new expiry, or NULL when the caller does not hold it (never changes the token)';

CREATE FUNCTION @extschema@.le_release(
    lease_key text,
    owner_id text,
    fencing_token bigint)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'le_release';
COMMENT ON FUNCTION @extschema@.le_release(text, text, bigint) IS
    'compare-and-release: frees the lease when this owner, role and token hold it; the next acquirer gets a higher token at once';

CREATE FUNCTION @extschema@.le_force_release(lease_key text)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_force_release';
COMMENT ON FUNCTION @extschema@.le_force_release(text) IS
    'administrator''s release of a lease whoever holds it; the holder''s token stops passing fences and the next acquirer gets a higher token';

CREATE FUNCTION @extschema@.le_prune_history()
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_prune_history';
COMMENT ON FUNCTION @extschema@.le_prune_history() IS
    'delete history rows of all leases that ended longer ago than leader_election.history_retention; returns the number deleted';

CREATE FUNCTION @extschema@.le_watch(lease_key text)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_watch';
COMMENT ON FUNCTION @extschema@.le_watch(text) IS
    'ask for notifications of this lease on channel leader_election for the rest of the session (call after LISTEN, then retry le_acquire): releases notify only while another session watches; true when it starts watching, false when this session already did';

CREATE FUNCTION @extschema@.le_unwatch(lease_key text)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_unwatch';
COMMENT ON FUNCTION @extschema@.le_unwatch(text) IS
    'stop watching a lease (see le_watch); true when this session watched it';

REVOKE ALL ON FUNCTION @extschema@.le_acquire(text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_renew(text, text, bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_release(text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_force_release(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_prune_history() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_watch(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_unwatch(text) FROM PUBLIC;

CREATE VIEW @extschema@.le_leases AS
SELECT l.lease_key,
       l.holder,
       l.holder_role,
       l.fencing_token,
       l.acquired_at,
       l.renewed_at,
       l.expires_at,
       COALESCE(l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp(), false) AS is_valid,
       CASE WHEN l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
            THEN pg_catalog.date_part('epoch', l.expires_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
            ELSE 0 END::double precision AS seconds_remaining,
       l.transitions,
       l.created_at
  FROM @extschema@.le_lease AS l;
COMMENT ON VIEW @extschema@.le_leases IS
    'every lease: holder, role, current fencing token, times, whether it is valid now by the server clock, seconds remaining, and the number of ownership periods granted (transitions)';
REVOKE ALL ON @extschema@.le_leases FROM PUBLIC;
GRANT SELECT ON @extschema@.le_leases TO PUBLIC;

GRANT SELECT ON @extschema@.le_lease_history TO PUBLIC;
