-- G12: the per-backend cache of lease rows that the fence keeps (one entry per
-- key checked) is bounded: a session that checks ever new keys, here keys
-- that do not exist (each check fails and is caught), does not grow it
-- without end, neither during the transaction nor after it.
CREATE EXTENSION IF NOT EXISTS leader_election;
\set VERBOSITY terse

DO $$
BEGIN
    FOR i IN 1..20000 LOOP
        BEGIN
            PERFORM le_fence_check('no-such-key-' || i, 1);
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    END LOOP;
END $$;
-- 20,000 entries would take about 7 MB.
SELECT count(*) = 1 AS one_cache, sum(total_bytes) < 3 * 1024 * 1024 AS bounded
  FROM pg_backend_memory_contexts
 WHERE 'leader_election lease row hints' IN (name, ident);
