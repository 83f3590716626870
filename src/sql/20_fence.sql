-- ---------------------------------------------------------------------------
-- The fence: a trigger that refuses writes carrying a stale fencing token,
-- the same check for code without a trigger, and the "highest accepted
-- token" fence for tokens issued elsewhere.  See src/fence.c.
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.le_fence()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'le_fence';
COMMENT ON FUNCTION @extschema@.le_fence() IS
    'fence trigger (BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW, and BEFORE TRUNCATE): arguments lease key, token column [, ''strict'']; rejects writes whose token is not the lease''s current one (LE001) or whose lease is not held (LE002); attach it with le_protect()';
-- Only the trigger machinery can call it; attaching it needs EXECUTE.
REVOKE ALL ON FUNCTION @extschema@.le_fence() FROM PUBLIC;

CREATE FUNCTION @extschema@.le_fence_check(lease_key text, fencing_token bigint)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_fence_check';
COMMENT ON FUNCTION @extschema@.le_fence_check(text, bigint) IS
    'the fence trigger''s check for code without a trigger: returns when fencing_token is the current token of a held, unexpired lease, raises LE001/LE002 otherwise; the lease is checked again under its fence lock at COMMIT (or PREPARE), which fails with LE001/LE002 if the token was superseded or the lease ended; call it before the writes it guards';
REVOKE ALL ON FUNCTION @extschema@.le_fence_check(text, bigint) FROM PUBLIC;

CREATE FUNCTION @extschema@.le_protect(
    "table" regclass,
    lease_key text,
    token_column name DEFAULT 'fencing_token',
    mode text DEFAULT 'lease')
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_protect';
COMMENT ON FUNCTION @extschema@.le_protect(regclass, text, name, text) IS
    'attach the fence to a table (triggers le_fence and le_fence_truncate, replacing earlier ones); the token column must be bigint; mode ''lease'' checks the lease''s token, ''strict'' also the writer''s role, ''advance'' uses le_fence_advance() on the resource named lease_key; runs as the caller';
REVOKE ALL ON FUNCTION @extschema@.le_protect(regclass, text, name, text) FROM PUBLIC;

CREATE FUNCTION @extschema@.le_unprotect("table" regclass)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_unprotect';
COMMENT ON FUNCTION @extschema@.le_unprotect(regclass) IS
    'remove the fence triggers that le_protect() attached; true when there were any';
REVOKE ALL ON FUNCTION @extschema@.le_unprotect(regclass) FROM PUBLIC;

-- "Highest accepted token" fences, for tokens issued by a lease that lives
-- elsewhere (another database, another lock service).  A resource belongs
-- to a role: the role that first advanced it, or the one an administrator
-- assigned with le_fence_assign().  Only members of that role may advance
-- it, so no other role can push it to 2^63-1 and lock its writers out;
-- le_fence_reset() is the administrator's way back.
CREATE TABLE @extschema@.le_fence_resource (
    resource        text        NOT NULL,
    highest_token   bigint      NOT NULL,
    updated_at      timestamptz NOT NULL,     -- when highest_token or owner_role last changed
    owner_role      name        NOT NULL,
    CONSTRAINT le_fence_resource_pkey PRIMARY KEY (resource),
    CONSTRAINT le_fence_resource_token_nonnegative CHECK (highest_token >= 0)
);
COMMENT ON TABLE @extschema@.le_fence_resource IS
    'highest fencing token accepted so far per resource name (0: none yet), written only by le_fence_advance(), le_fence_assign() and le_fence_reset()';
COMMENT ON COLUMN @extschema@.le_fence_resource.owner_role IS
    'the role whose members may advance the resource: the first role that advanced it, or the one given to le_fence_assign()';
SELECT pg_catalog.pg_extension_config_dump('le_fence_resource', '');
REVOKE ALL ON @extschema@.le_fence_resource FROM PUBLIC;
GRANT SELECT ON @extschema@.le_fence_resource TO PUBLIC;

-- The lock_timeout that bounds a wait of the PL/pgSQL functions below and
-- in 30_jobs.sql: leader_election.lock_timeout, or the caller's shorter
-- lock_timeout (milliseconds, as text for set_config).  See
-- src/sql_support.c.
CREATE FUNCTION @extschema@._le_lock_wait_bound()
RETURNS text
LANGUAGE c VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_lock_wait_bound';
COMMENT ON FUNCTION @extschema@._le_lock_wait_bound() IS
    'internal, not API: the lock_timeout (ms) that bounds the waits of the extension''s PL/pgSQL functions: leader_election.lock_timeout, or the caller''s lock_timeout when shorter';
REVOKE ALL ON FUNCTION @extschema@._le_lock_wait_bound() FROM PUBLIC;

-- The work of le_fence_advance(), with the calling role as an argument.
-- SECURITY DEFINER because ordinary roles cannot write le_fence_resource;
-- never executable by PUBLIC, because whoever can execute it can name any
-- role as caller: only the C wrapper le_fence_advance() calls it.
--
-- Locking.  The resource's row lock is kept to the end of the caller's
-- transaction, so a later token's advance waits until a write accepted with
-- an older token has committed or rolled back.  The uncontended path locks
-- the row with SKIP LOCKED and changes no setting; when the row is missing
-- or locked by another transaction, the wait is bounded by
-- _le_lock_wait_bound() (SET LOCAL, restored afterwards; undone with the
-- block's subtransaction on error) and ends with 55P03.
CREATE FUNCTION @extschema@._le_fence_advance(resource text, fencing_token bigint, caller oid)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    res le_fence_resource;
    owner_oid oid;
    saved text;
    bound text;
    created boolean := false;
BEGIN
    IF resource IS NULL OR fencing_token IS NULL OR caller IS NULL THEN
        RAISE EXCEPTION 'resource and fencing_token must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF resource OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(resource) OPERATOR(pg_catalog.>) 200 THEN
        RAISE EXCEPTION 'resource must be 1 to 200 bytes long' USING ERRCODE = '22023';
    END IF;
    IF fencing_token OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION 'fencing_token must be positive, got %', fencing_token USING ERRCODE = '22023';
    END IF;

    SELECT * INTO res FROM le_fence_resource AS r
     WHERE r.resource OPERATOR(pg_catalog.=) _le_fence_advance.resource
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Missing, or locked by another transaction: wait, boundedly.
        BEGIN
            saved := pg_catalog.current_setting('lock_timeout');
            bound := _le_lock_wait_bound();
            PERFORM pg_catalog.set_config('lock_timeout', bound, true);
            LOOP
                SELECT * INTO res FROM le_fence_resource AS r
                 WHERE r.resource OPERATOR(pg_catalog.=) _le_fence_advance.resource
                   FOR UPDATE;
                EXIT WHEN FOUND;
                -- A new resource belongs to the role that first advances it.
                INSERT INTO le_fence_resource AS r
                    (resource, highest_token, updated_at, owner_role)
                VALUES (resource, fencing_token, pg_catalog.clock_timestamp(),
                        pg_catalog.pg_get_userbyid(caller))
                ON CONFLICT ON CONSTRAINT le_fence_resource_pkey DO NOTHING;
                IF FOUND THEN
                    created := true;
                    EXIT;
                END IF;
            END LOOP;
            PERFORM pg_catalog.set_config('lock_timeout', saved, true);
        EXCEPTION WHEN lock_not_available THEN
            RAISE EXCEPTION 'fence resource "%" is locked by another transaction', resource
                USING ERRCODE = '55P03',
                      DETAIL = 'A transaction that advanced it (or is creating it) has not ended.',
                      HINT = pg_catalog.format('Waits are bounded by leader_election.lock_timeout, or by your lock_timeout when shorter (here %s ms); look for an idle-in-transaction or prepared transaction in pg_stat_activity and pg_prepared_xacts.', bound);
        END;
        IF created THEN
            RETURN fencing_token;
        END IF;
    END IF;

    -- A dropped owner role admits nobody (an administrator can reassign).
    -- Function calls, not queries: this runs for every advance.
    owner_oid := pg_catalog.to_regrole(pg_catalog.quote_ident(res.owner_role));
    IF owner_oid IS NULL OR NOT pg_catalog.pg_has_role(caller, owner_oid, 'MEMBER') THEN
        RAISE EXCEPTION 'role "%" may not advance fence resource "%"', pg_catalog.pg_get_userbyid(caller), resource
            USING ERRCODE = '42501',
                  DETAIL = pg_catalog.format('The resource belongs to role %s.', res.owner_role),
                  HINT = 'Use a resource name of your own, or ask an administrator to grant you that role or to call le_fence_assign().';
    END IF;
    IF fencing_token OPERATOR(pg_catalog.<) res.highest_token THEN
        RAISE EXCEPTION 'fencing token % of resource "%" is stale', fencing_token, resource
            USING ERRCODE = 'LE001',
                  DETAIL = pg_catalog.format('The highest token accepted is %s.', res.highest_token),
                  HINT = 'A leader whose token was superseded must stop working, not retry.';
    END IF;
    -- The same token again (every row of a fenced table): the row lock
    -- taken above is all it needs.
    IF fencing_token OPERATOR(pg_catalog.>) res.highest_token THEN
        UPDATE le_fence_resource AS r
           SET highest_token = fencing_token, updated_at = pg_catalog.clock_timestamp()
         WHERE r.resource OPERATOR(pg_catalog.=) _le_fence_advance.resource;
    END IF;
    RETURN fencing_token;
END
$$;
COMMENT ON FUNCTION @extschema@._le_fence_advance(text, bigint, oid) IS
    'internal, not API: the work of le_fence_advance() for the role given; not executable by PUBLIC (it would let anyone act as any role), called only through le_fence_advance()';
REVOKE ALL ON FUNCTION @extschema@._le_fence_advance(text, bigint, oid) FROM PUBLIC;

-- The API: C, so that it can pass the calling role to _le_fence_advance()
-- and run it with the search path pinned to this schema by OID (see
-- src/sql_support.c).
CREATE FUNCTION @extschema@.le_fence_advance(resource text, fencing_token bigint)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_fence_advance';
COMMENT ON FUNCTION @extschema@.le_fence_advance(text, bigint) IS
    'fence for tokens issued elsewhere: accepts fencing_token when it is at least the highest token accepted for resource (and records it), raises LE001 otherwise; only members of the resource''s owner role (the first role that advanced it, or set by le_fence_assign) may advance it (42501); keeps the resource''s row lock to the end of the transaction; waits at most leader_election.lock_timeout (55P03)';
REVOKE ALL ON FUNCTION @extschema@.le_fence_advance(text, bigint) FROM PUBLIC;

-- Administrator's tools for "highest accepted token" resources.  SECURITY
-- INVOKER: they write le_fence_resource, which only its owner (the
-- extension owner, normally a superuser) may.

-- Forget a resource.
CREATE FUNCTION @extschema@._le_fence_reset(resource text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bound text := _le_lock_wait_bound();
    saved text := pg_catalog.current_setting('lock_timeout');
    n bigint;
BEGIN
    IF resource IS NULL THEN
        RAISE EXCEPTION 'resource must not be NULL' USING ERRCODE = '22004';
    END IF;
    BEGIN
        PERFORM pg_catalog.set_config('lock_timeout', bound, true);
        DELETE FROM le_fence_resource AS r
         WHERE r.resource OPERATOR(pg_catalog.=) _le_fence_reset.resource;
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM pg_catalog.set_config('lock_timeout', saved, true);
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'fence resource "%" is locked by another transaction', resource
            USING ERRCODE = '55P03',
                  HINT = pg_catalog.format('Waits are bounded by leader_election.lock_timeout, or by your lock_timeout when shorter (here %s ms).', bound);
    END;
    RETURN n OPERATOR(pg_catalog.>) 0;
END
$$;
COMMENT ON FUNCTION @extschema@._le_fence_reset(text) IS
    'internal, not API: the work of le_fence_reset(), run by its C entry point with the search path pinned to the extension''s schema by OID; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_fence_reset(text) FROM PUBLIC;

-- The entry point: C, which runs _le_fence_reset() with names resolved in this
-- schema by OID, whatever it is called now (src/sql_support.c).
CREATE FUNCTION @extschema@.le_fence_reset(resource text)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_call_worker';
COMMENT ON FUNCTION @extschema@.le_fence_reset(text) IS
    'administrators only: forget a le_fence_advance() resource (its highest token and its owner role); the next advance accepts any token and makes its role the owner; true when the resource existed';
REVOKE ALL ON FUNCTION @extschema@.le_fence_reset(text) FROM PUBLIC;

-- Register a resource for a role, or hand it to another.
CREATE FUNCTION @extschema@._le_fence_assign(resource text, owner_role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bound text := _le_lock_wait_bound();
    saved text := pg_catalog.current_setting('lock_timeout');
    role_name name;
BEGIN
    IF resource IS NULL OR owner_role IS NULL THEN
        RAISE EXCEPTION 'resource and owner_role must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF resource OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(resource) OPERATOR(pg_catalog.>) 200 THEN
        RAISE EXCEPTION 'resource must be 1 to 200 bytes long' USING ERRCODE = '22023';
    END IF;
    role_name := (SELECT a.rolname FROM pg_catalog.pg_roles AS a
                   WHERE a.oid OPERATOR(pg_catalog.=) owner_role::pg_catalog.oid);
    IF role_name IS NULL THEN
        RAISE EXCEPTION 'role with OID % does not exist', owner_role::pg_catalog.oid
            USING ERRCODE = '22023', HINT = 'Pass an existing role, e.g. ''app_writer''::regrole.';
    END IF;
    BEGIN
        PERFORM pg_catalog.set_config('lock_timeout', bound, true);
        INSERT INTO le_fence_resource AS r (resource, highest_token, updated_at, owner_role)
        VALUES (resource, 0, pg_catalog.clock_timestamp(), role_name)
        ON CONFLICT ON CONSTRAINT le_fence_resource_pkey DO UPDATE
            SET owner_role = excluded.owner_role, updated_at = excluded.updated_at;
        PERFORM pg_catalog.set_config('lock_timeout', saved, true);
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'fence resource "%" is locked by another transaction', resource
            USING ERRCODE = '55P03',
                  HINT = pg_catalog.format('Waits are bounded by leader_election.lock_timeout, or by your lock_timeout when shorter (here %s ms).', bound);
    END;
END
$$;
COMMENT ON FUNCTION @extschema@._le_fence_assign(text, regrole) IS
    'internal, not API: the work of le_fence_assign(), run by its C entry point with the search path pinned to the extension''s schema by OID; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_fence_assign(text, regrole) FROM PUBLIC;

-- The entry point: C, which runs _le_fence_assign() with names resolved in this
-- schema by OID, whatever it is called now (src/sql_support.c).
CREATE FUNCTION @extschema@.le_fence_assign(resource text, owner_role regrole)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_call_worker';
COMMENT ON FUNCTION @extschema@.le_fence_assign(text, regrole) IS
    'administrators only: make owner_role the role whose members may advance a le_fence_advance() resource, creating it (highest token 0) when new, keeping its highest token otherwise; register resources before first use so that no other role can claim them';
REVOKE ALL ON FUNCTION @extschema@.le_fence_assign(text, regrole) FROM PUBLIC;

-- Trigger mode of le_fence_advance (le_protect(..., mode => 'advance')):
-- arguments resource, token column.  INSERT and UPDATE use the new row's
-- token, DELETE and TRUNCATE leader_election.fencing_token; an UPDATE that
-- keeps the row's token also needs leader_election.fencing_token (22004).
CREATE FUNCTION @extschema@._le_fence_advance_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    token bigint;
    setting text := pg_catalog.current_setting('leader_election.fencing_token', true);
BEGIN
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'BEFORE' OR TG_NARGS OPERATOR(pg_catalog.<>) 2
       OR (TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' AND TG_OP OPERATOR(pg_catalog.<>) 'TRUNCATE') THEN
        RAISE EXCEPTION 'le_fence_advance_trigger() must fire BEFORE, FOR EACH ROW (or for TRUNCATE), with arguments resource and token column'
            USING ERRCODE = '09000', HINT = 'Attach the fence with le_protect(..., mode => ''advance'').';
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        token := pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.->>) TG_ARGV[1];
        IF token IS NULL THEN
            RAISE EXCEPTION 'fencing token column "%" of table "%" is NULL', TG_ARGV[1], TG_TABLE_NAME
                USING ERRCODE = '22004';
        END IF;
        IF setting IS NOT NULL AND setting OPERATOR(pg_catalog.<>) ''
           AND setting::bigint OPERATOR(pg_catalog.<>) token THEN
            RAISE EXCEPTION 'fencing token % in column "%" disagrees with leader_election.fencing_token = %',
                token, TG_ARGV[1], setting USING ERRCODE = '22023';
        END IF;
    ELSE
        IF setting IS NULL OR setting OPERATOR(pg_catalog.=) '' THEN
            RAISE EXCEPTION '% on fenced table "%" needs leader_election.fencing_token', TG_OP, TG_TABLE_NAME
                USING ERRCODE = '22004',
                      HINT = 'Run SET LOCAL leader_election.fencing_token = <your token> in the transaction first.';
        END IF;
        token := setting::bigint;
    END IF;
    PERFORM le_fence_advance(TG_ARGV[0], token);
    -- An UPDATE that keeps the row's token (column not assigned, or assigned
    -- the same value) says nothing about the writer: the token may be a
    -- newer leader's.  The transaction must declare it (the setting, which
    -- agrees with the row, checked above); the row's token is judged first,
    -- so a stale one still gets LE001.
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE'
       AND (setting IS NULL OR setting OPERATOR(pg_catalog.=) '')
       AND (pg_catalog.to_jsonb(OLD) OPERATOR(pg_catalog.->>) TG_ARGV[1])::bigint
           IS NOT DISTINCT FROM token THEN
        RAISE EXCEPTION 'UPDATE of fenced table "%" keeps fencing token % in column "%" without the transaction declaring it',
            TG_TABLE_NAME, token, TG_ARGV[1]
            USING ERRCODE = '22004',
                  DETAIL = 'A row''s own token does not show who writes it: it may be a newer leader''s.',
                  HINT = 'Run SET LOCAL leader_election.fencing_token = <your token> in the transaction first, or assign the token column.';
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION @extschema@._le_fence_advance_trigger() IS
    'internal, not API: the work of the trigger le_fence_advance_trigger(); not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_fence_advance_trigger() FROM PUBLIC;

-- The trigger itself: C, so that a call outside a trigger fails with
-- 39P01 like le_fence() (PL/pgSQL would raise 0A000); it runs
-- _le_fence_advance_trigger() with the same trigger data (src/sql_support.c).
CREATE FUNCTION @extschema@.le_fence_advance_trigger()
RETURNS trigger
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_fence_advance_trigger';
COMMENT ON FUNCTION @extschema@.le_fence_advance_trigger() IS
    'trigger mode of le_fence_advance(): arguments resource, token column; attach it with le_protect(table, resource, column, ''advance''); 39P01 when called outside a trigger';
REVOKE ALL ON FUNCTION @extschema@.le_fence_advance_trigger() FROM PUBLIC;
