-- ---------------------------------------------------------------------------
-- Partition groups: N partitions of a group spread over its live members,
-- each partition and each membership an ordinary row of le_lease (so
-- le_leases, the history, tokens, notifications, metrics, le_fence_check and
-- the fence work on them unchanged).  The C functions of src/group.c are the
-- only writers, by direct access (src/lease_rows.c); src/README.md
-- ("Partition groups") describes the design, doc/reference.md the calls.
-- ---------------------------------------------------------------------------

CREATE SEQUENCE @extschema@.le_group_id_seq AS bigint;
COMMENT ON SEQUENCE @extschema@.le_group_id_seq IS 'ids of partition groups (le_group.group_id)';

-- A group is permanent, like a lease key: its partitions' rows and tokens
-- must never start again, so there is no call that drops one.
CREATE TABLE @extschema@.le_group (
    group_id    bigint      NOT NULL DEFAULT pg_catalog.nextval('le_group_id_seq'::pg_catalog.regclass),
    group_name  text        NOT NULL,
    partitions  integer     NOT NULL,
    owner_role  regrole     NOT NULL,
    max_moves   integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT le_group_pkey PRIMARY KEY (group_id),
    CONSTRAINT le_group_name_unique UNIQUE (group_name),
    CONSTRAINT le_group_partitions_range CHECK (partitions OPERATOR(pg_catalog.>=) 1
                                                AND partitions OPERATOR(pg_catalog.<=) 16384),
    CONSTRAINT le_group_max_moves_positive CHECK (max_moves OPERATOR(pg_catalog.>=) 1)
);
ALTER SEQUENCE @extschema@.le_group_id_seq OWNED BY @extschema@.le_group.group_id;
COMMENT ON TABLE @extschema@.le_group IS
    'one row per partition group, never deleted; written only by le_group_create';
COMMENT ON COLUMN @extschema@.le_group.group_name IS
    'name of the group (1 to 63 letters, digits, _, . or -); its partitions are the leases le:group:NAME:0 .. le:group:NAME:N-1, its members'' memberships le:group:NAME:member:ID';
COMMENT ON COLUMN @extschema@.le_group.partitions IS
    'number of partitions (1 to 16384), fixed at creation';
COMMENT ON COLUMN @extschema@.le_group.owner_role IS
    'role that created the group (by OID: renaming it changes nothing); its members must be members of this role';
COMMENT ON COLUMN @extschema@.le_group.max_moves IS
    'at most this many of a member''s partitions are marked revoke at once while the group rebalances';
COMMENT ON COLUMN @extschema@.le_group.created_at IS 'when the group was created';

-- The group of a lease row: never changed after the row is made, and only
-- group rows are indexed by it, so renewals stay HOT and plain leases cost
-- the index nothing.  Without deduplication, so that an entry of a dead
-- version (left by an update that could not stay HOT) is marked dead by the
-- first scan that finds it and skipped by the next ones: in a posting list
-- with the live version's entry it could not be, and every heartbeat would
-- visit it again until VACUUM.
ALTER TABLE @extschema@.le_lease
    ADD COLUMN group_id        bigint,
    ADD COLUMN group_partition integer,
    ADD COLUMN group_held      bytea,
    ADD CONSTRAINT le_lease_group_consistent
        CHECK (group_partition IS NULL OR (group_id IS NOT NULL AND group_partition OPERATOR(pg_catalog.>=) 0));
COMMENT ON COLUMN @extschema@.le_lease.group_id IS
    'partition group (le_group.group_id) this row is a partition or membership of; NULL for a plain lease';
COMMENT ON COLUMN @extschema@.le_lease.group_partition IS
    'partition number (0 to partitions - 1) of a group''s partition row; NULL for a membership or a plain lease';
COMMENT ON COLUMN @extschema@.le_lease.group_held IS
    'membership rows: bit p (of byte p / 8) set for each partition p its member held at its last heartbeat, a superset of those it holds validly, so that a heartbeat of a settled group need not read every partition; NULL: not known';
CREATE INDEX le_lease_group ON @extschema@.le_lease (group_id, group_partition)
    WITH (deduplicate_items = off)
    WHERE group_id IS NOT NULL;
COMMENT ON INDEX @extschema@.le_lease_group IS
    'the rows of a partition group, partitions in ascending order, then its memberships: one scan per heartbeat';

SELECT pg_catalog.pg_extension_config_dump('le_group', '');
SELECT pg_catalog.pg_extension_config_dump('le_group_id_seq', '');
REVOKE ALL ON @extschema@.le_group FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.le_group_id_seq FROM PUBLIC;

CREATE FUNCTION @extschema@.le_group_create(
    group_name text,
    partitions integer,
    max_moves integer DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_group_create';
COMMENT ON FUNCTION @extschema@.le_group_create(text, integer, integer) IS
    'create a partition group of this many partitions (1 to 16384) owned by the caller''s role, with max_moves (default: an eighth of the partitions, at least 1); true when created, false when it exists with the same settings';

-- Like le_acquire, the heartbeat pins no search_path (it resolves no name;
-- a SET clause would cost every call a GUC save and restore).
CREATE FUNCTION @extschema@.le_group_heartbeat(
    group_name text,
    member_id text,
    ttl interval DEFAULT '15 seconds')
RETURNS TABLE(partition integer, lease_key text, fencing_token bigint, expires_at timestamptz,
              state text, new_period boolean)
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 64
AS 'MODULE_PATHNAME', 'le_group_heartbeat';
COMMENT ON FUNCTION @extschema@.le_group_heartbeat(text, text, interval) IS
    'join or stay in a partition group for ttl: the membership (state member) and then the caller''s partitions in ascending order, owned (held to the membership''s expiry; new_period: a new token), revoke (release it after stopping work on it) or pending (assigned, still held by another member)';

CREATE FUNCTION @extschema@.le_group_leave(group_name text, member_id text)
RETURNS integer
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_group_leave';
COMMENT ON FUNCTION @extschema@.le_group_leave(text, text) IS
    'leave a partition group: release every partition this member id and role hold and the membership, in one transaction; returns the number of partitions released';

CREATE FUNCTION @extschema@.le_group_assignment(group_name text)
RETURNS TABLE(partition integer, lease_key text, holder text, fencing_token bigint,
              expires_at timestamptz, target text, state text)
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 64
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_group_assignment';
COMMENT ON FUNCTION @extschema@.le_group_assignment(text) IS
    'the assignment of a group''s partitions as the server computes it now: per partition its lease, its target member and its state (owned, moving, free, unassigned)';

REVOKE ALL ON FUNCTION @extschema@.le_group_create(text, integer, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_group_heartbeat(text, text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_group_leave(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.le_group_assignment(text) FROM PUBLIC;
-- Reads only, what le_group_partitions shows too.
GRANT EXECUTE ON FUNCTION @extschema@.le_group_assignment(text) TO PUBLIC;

CREATE VIEW @extschema@.le_groups AS
SELECT g.group_name,
       g.partitions,
       g.owner_role::pg_catalog.text::pg_catalog.name AS owner_role,
       g.max_moves,
       g.created_at,
       (SELECT pg_catalog.count(*) FROM @extschema@.le_lease AS l
         WHERE l.group_id OPERATOR(pg_catalog.=) g.group_id AND l.group_partition IS NULL
           AND l.expires_at OPERATOR(pg_catalog.>) n.now) AS members,
       (SELECT pg_catalog.count(*) FROM @extschema@.le_lease AS l
         WHERE l.group_id OPERATOR(pg_catalog.=) g.group_id AND l.group_partition IS NOT NULL
           AND l.expires_at OPERATOR(pg_catalog.>) n.now) AS partitions_held
  FROM @extschema@.le_group AS g,
       LATERAL (SELECT pg_catalog.clock_timestamp() AS now) AS n;
COMMENT ON VIEW @extschema@.le_groups IS
    'every partition group: its settings, its live members (valid memberships) and how many of its partitions are validly held, by the server clock';

CREATE VIEW @extschema@.le_group_members AS
SELECT g.group_name,
       l.holder AS member_id,
       l.holder_role AS member_role,
       l.fencing_token,
       l.acquired_at AS joined_at,
       l.renewed_at AS heartbeat_at,
       l.expires_at,
       l.expires_at OPERATOR(pg_catalog.>) n.now AS is_valid,
       pg_catalog.date_part('epoch', n.now OPERATOR(pg_catalog.-) l.renewed_at)::double precision
           AS heartbeat_age_seconds,
       (SELECT pg_catalog.count(*) FROM @extschema@.le_lease AS p
         WHERE p.group_id OPERATOR(pg_catalog.=) l.group_id AND p.group_partition IS NOT NULL
           AND p.holder OPERATOR(pg_catalog.=) l.holder
           AND p.holder_role OPERATOR(pg_catalog.=) l.holder_role
           AND p.expires_at OPERATOR(pg_catalog.>) n.now) AS partitions_held
  FROM @extschema@.le_group AS g
  JOIN @extschema@.le_lease AS l ON l.group_id OPERATOR(pg_catalog.=) g.group_id
                                AND l.group_partition IS NULL AND l.holder IS NOT NULL,
       LATERAL (SELECT pg_catalog.clock_timestamp() AS now) AS n;
COMMENT ON VIEW @extschema@.le_group_members IS
    'the members of every partition group that have not left (is_valid false: the membership lapsed): role, membership token, when it joined and last heartbeat, and how many partitions it holds validly';

CREATE VIEW @extschema@.le_group_partitions AS
SELECT g.group_name,
       l.group_partition AS partition,
       l.lease_key,
       l.holder,
       l.holder_role,
       l.fencing_token,
       l.expires_at,
       COALESCE(l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp(), false) AS is_valid
  FROM @extschema@.le_group AS g
  JOIN @extschema@.le_lease AS l ON l.group_id OPERATOR(pg_catalog.=) g.group_id
                                AND l.group_partition IS NOT NULL;
COMMENT ON VIEW @extschema@.le_group_partitions IS
    'every partition of every group: its lease key, holder (member id), role, current token, expiry and whether it is validly held now by the server clock';

REVOKE ALL ON @extschema@.le_groups, @extschema@.le_group_members, @extschema@.le_group_partitions FROM PUBLIC;
GRANT SELECT ON @extschema@.le_groups, @extschema@.le_group_members, @extschema@.le_group_partitions TO PUBLIC;
