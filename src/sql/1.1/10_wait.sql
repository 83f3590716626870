-- ---------------------------------------------------------------------------
-- le_acquire gains a server-side wait and the leader's metadata: one new
-- signature replaces 1.0's (text, text, interval), same C entry point (it
-- serves a not yet updated 1.0 catalog too, by its number of arguments).
--
-- The EXECUTE privileges roles (and PUBLIC) had on the 1.0 function (from
-- le_grant's campaign use, or a GRANT of their own) are given on the new
-- one, each by its grantor (_le_copy_execute_grants, 05_copy_grants.sql),
-- before the old one is dropped.
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.le_acquire(
    lease_key text,
    owner_id text,
    ttl interval DEFAULT '15 seconds',
    wait interval DEFAULT NULL,
    metadata jsonb DEFAULT NULL,
    OUT acquired boolean,
    OUT fencing_token bigint,
    OUT holder text,
    OUT expires_at timestamptz,
    OUT new_period boolean)
RETURNS record
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'le_acquire';
COMMENT ON FUNCTION @extschema@.le_acquire(text, text, interval, interval, jsonb) IS
    'try to take the lease; returns the caller''s fencing token when granted (new_period true: a new, higher token; false: the valid holder again, same token and a new expiry), or the current holder and its expiry when refused (new_period NULL); with wait, waits in the server (first come, first served) until granted or wait ran out, woken by releases and at the expiry; metadata is published with the lease (le_leases.metadata)';
REVOKE ALL ON FUNCTION @extschema@.le_acquire(text, text, interval, interval, jsonb) FROM PUBLIC;

SELECT @extschema@._le_copy_execute_grants('le_acquire', 3, 5);

DROP FUNCTION @extschema@.le_acquire(text, text, interval);
