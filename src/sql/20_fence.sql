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
-- elsewhere (another database, another lock service).
CREATE TABLE @extschema@.le_fence_resource (
    resource        text        NOT NULL,
    highest_token   bigint      NOT NULL,
    updated_at      timestamptz NOT NULL,
    CONSTRAINT le_fence_resource_pkey PRIMARY KEY (resource),
    CONSTRAINT le_fence_resource_token_positive CHECK (highest_token > 0)
);
COMMENT ON TABLE @extschema@.le_fence_resource IS
    'highest fencing token accepted so far per resource name, written only by le_fence_advance()';
SELECT pg_catalog.pg_extension_config_dump('le_fence_resource', '');
REVOKE ALL ON @extschema@.le_fence_resource FROM PUBLIC;
GRANT SELECT ON @extschema@.le_fence_resource TO PUBLIC;

-- SECURITY DEFINER because ordinary roles cannot write le_fence_resource:
-- the body is one upsert on it, with the caller's values as parameters.
-- The row lock it takes is kept to the end of the caller's transaction, so
-- a later token's advance waits until a write accepted with an older token
-- has committed or rolled back.
CREATE FUNCTION @extschema@.le_fence_advance(resource text, fencing_token bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    accepted bigint;
    highest bigint;
BEGIN
    IF resource IS NULL OR fencing_token IS NULL THEN
        RAISE EXCEPTION 'resource and fencing_token must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF resource OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(resource) OPERATOR(pg_catalog.>) 200 THEN
        RAISE EXCEPTION 'resource must be 1 to 200 bytes long' USING ERRCODE = '22023';
    END IF;
    IF fencing_token OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION 'fencing_token must be positive, got %', fencing_token USING ERRCODE = '22023';
    END IF;

    INSERT INTO @extschema@.le_fence_resource AS r (resource, highest_token, updated_at)
    VALUES (resource, fencing_token, pg_catalog.clock_timestamp())
    ON CONFLICT ON CONSTRAINT le_fence_resource_pkey DO UPDATE
        SET highest_token = excluded.highest_token, updated_at = excluded.updated_at
        WHERE r.highest_token OPERATOR(pg_catalog.<=) excluded.highest_token
    RETURNING r.highest_token INTO accepted;

    IF accepted IS NULL THEN
        SELECT r.highest_token INTO highest
          FROM @extschema@.le_fence_resource AS r
         WHERE r.resource OPERATOR(pg_catalog.=) le_fence_advance.resource;
        RAISE EXCEPTION 'fencing token % of resource "%" is stale', fencing_token, resource
            USING ERRCODE = 'LE001',
                  DETAIL = pg_catalog.format('The highest token accepted is %s.', highest),
                  HINT = 'A leader whose token was superseded must stop working, not retry.';
    END IF;
    RETURN accepted;
END
$$;
COMMENT ON FUNCTION @extschema@.le_fence_advance(text, bigint) IS
    'fence for tokens issued elsewhere: accepts fencing_token when it is at least the highest token accepted for resource (and records it), raises LE001 otherwise; keeps the resource''s row lock to the end of the transaction';
REVOKE ALL ON FUNCTION @extschema@.le_fence_advance(text, bigint) FROM PUBLIC;

-- Trigger mode of le_fence_advance (le_protect(..., mode => 'advance')):
-- arguments resource, token column.  INSERT and UPDATE use the new row's
-- token, DELETE and TRUNCATE leader_election.fencing_token.
CREATE FUNCTION @extschema@.le_fence_advance_trigger()
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
    PERFORM @extschema@.le_fence_advance(TG_ARGV[0], token);
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION @extschema@.le_fence_advance_trigger() IS
    'trigger mode of le_fence_advance(): arguments resource, token column; attach it with le_protect(table, resource, column, ''advance'')';
REVOKE ALL ON FUNCTION @extschema@.le_fence_advance_trigger() FROM PUBLIC;
