-- ---------------------------------------------------------------------------
-- The fence per partition of a group: le_protect gains group_name and
-- partition_column (one table holds the rows of every partition, each row
-- judged by the lease of the partition it names), and lease_key becomes
-- optional.  One new signature replaces 1.0's (regclass, text, name, text),
-- same C entry point (it serves a not yet updated 1.0 catalog too, by its
-- number of arguments).
--
-- The EXECUTE privileges roles (and PUBLIC) had on the 1.0 function (from
-- le_grant's protect use, or a GRANT of their own) are given on the new
-- one, each by its grantor (_le_copy_execute_grants, 05_copy_grants.sql),
-- before the old one is dropped.
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.le_protect(
    "table" regclass,
    lease_key text DEFAULT NULL,
    token_column name DEFAULT 'fencing_token',
    mode text DEFAULT 'lease',
    group_name text DEFAULT NULL,
    partition_column name DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_protect';
COMMENT ON FUNCTION @extschema@.le_protect(regclass, text, name, text, text, name) IS
    'attach the fence to a table (triggers le_fence and le_fence_truncate, replacing earlier ones); the token column must be bigint; with lease_key: mode ''lease'' checks the lease''s token, ''strict'' also the writer''s role, ''advance'' uses le_fence_advance() on the resource named lease_key; with group_name and partition_column (smallint, integer or bigint) instead: each row is checked against the lease of the partition of the group it names, le:group:<group_name>:<partition> (modes ''lease'' and ''strict''); runs as the caller';
REVOKE ALL ON FUNCTION @extschema@.le_protect(regclass, text, name, text, text, name) FROM PUBLIC;

SELECT @extschema@._le_copy_execute_grants('le_protect', 4, 6);

DROP FUNCTION @extschema@.le_protect(regclass, text, name, text);

COMMENT ON FUNCTION @extschema@.le_fence() IS
    'fence trigger (BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW, and BEFORE TRUNCATE): arguments lease key, token column [, ''strict'']; or, fencing each row by the lease of its partition of a group, group name, token column, ''lease'' or ''strict'', partition column (TRUNCATE refused); rejects writes whose token is not the lease''s current one (LE001) or whose lease is not held (LE002); attach it with le_protect()';
