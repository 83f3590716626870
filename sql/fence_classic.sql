-- G5: the classic fencing scenario.  Leader A holds token
-- 41 and pauses (a GC pause, a SIGSTOP) past its ttl; B acquires token 42
-- and writes; A resumes and writes with 41: the database refuses it and
-- nothing of A's late write is stored (G5: no protected write commits
-- with a token older than the lease's current one).
CREATE EXTENSION leader_election;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

-- Bring the lease to 40 tokens issued, as if 40 grants had happened (the
-- superuser writes the extension's table directly for this setup only).
SELECT acquired, fencing_token FROM le_acquire('classic', 'setup', '1 minute');
SELECT le_release('classic', 'setup', 1);
UPDATE le_lease SET fencing_token = 40 WHERE lease_key = 'classic';

CREATE TABLE ledger (id bigserial PRIMARY KEY, writer text NOT NULL,
                     fencing_token bigint NOT NULL);
SELECT le_protect('ledger', 'classic');

-- A acquires token 41 and writes while it holds the lease.
SELECT acquired, fencing_token FROM le_acquire('classic', 'A', '2 seconds');
INSERT INTO ledger (writer, fencing_token) VALUES ('A before pause', 41);

-- A pauses; its lease expires by the server clock.
SELECT pg_sleep(2.2);
SELECT is_valid FROM le_leases WHERE lease_key = 'classic';

-- B acquires token 42 and writes: accepted.
SELECT acquired, fencing_token, holder FROM le_acquire('classic', 'B', '1 minute');
INSERT INTO ledger (writer, fencing_token) VALUES ('B', 42);

-- A resumes, still believing it leads, and writes with 41: rejected.
INSERT INTO ledger (writer, fencing_token) VALUES ('A after pause', 41);
\echo :LAST_ERROR_SQLSTATE
-- The same through the explicit check, and inside a transaction that
-- guards several writes.
BEGIN;
SELECT le_fence_check('classic', 41);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- A cannot renew or release B's lease either.
SELECT le_renew('classic', 'A', 41) IS NULL AS a_cannot_renew;
SELECT le_release('classic', 'A', 41) AS a_released;

-- Nothing of A's late writes is stored; B's write is.
SELECT writer, fencing_token FROM ledger ORDER BY id;

-- The history shows who held which token.
SELECT holder, fencing_token, end_reason FROM le_lease_history
 WHERE lease_key = 'classic' ORDER BY fencing_token;

DROP TABLE ledger;
DROP EXTENSION leader_election;
