-- G3: a token that was returned to anyone is never issued again,
-- also when the transaction (or savepoint) that was granted it rolls back.
-- Tokens come from the sequence le_token_seq, shared by every key, so they
-- rise but not by one per key; new_period tells a new ownership period from
-- the valid holder's repeated call.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY sqlstate
\set ON_ERROR_STOP 0

-- A grant inside a transaction that rolls back: the next grant of the key
-- gets a higher token, not the rolled-back one.
BEGIN;
SELECT acquired, new_period, fencing_token AS rolled_back FROM le_acquire('tok-rb', 'a', '1 minute') \gset
ROLLBACK;
SELECT :'acquired' AS first_acquired, :'new_period' AS first_new_period;
SELECT holder, fencing_token FROM le_leases WHERE lease_key = 'tok-rb';
SELECT acquired, new_period, fencing_token > :rolled_back AS higher, holder
  FROM le_acquire('tok-rb', 'b', '1 minute');
SELECT fencing_token AS after_rb FROM le_leases WHERE lease_key = 'tok-rb' \gset

-- The same with a savepoint rolled back inside a transaction that commits.
BEGIN;
SAVEPOINT s;
SELECT fencing_token AS sp_token FROM le_acquire('tok-sp', 'a', '1 minute') \gset
ROLLBACK TO SAVEPOINT s;
SELECT acquired, new_period, fencing_token > :sp_token AS higher, holder
  FROM le_acquire('tok-sp', 'b', '1 minute');
COMMIT;

-- A rolled-back takeover of a released lease: the next owner's token is
-- above both the released one and the rolled-back one.
SELECT le_release('tok-rb', 'b', :after_rb) AS released;
BEGIN;
SELECT fencing_token AS rb2 FROM le_acquire('tok-rb', 'c', '1 minute') \gset
ROLLBACK;
SELECT acquired, fencing_token > :rb2 AS above_rolled_back, :rb2 > :after_rb AS rolled_back_above_released
  FROM le_acquire('tok-rb', 'd', '1 minute');

-- A grant that errors later in its transaction (here: a division by zero)
-- is rolled back too; the token it returned is not reused.
BEGIN;
SELECT fencing_token AS err_token FROM le_acquire('tok-err', 'a', '1 minute') \gset
SELECT 1 / 0;
ROLLBACK;
SELECT fencing_token > :err_token AS higher FROM le_acquire('tok-err', 'b', '1 minute');

-- new_period: true for a new period, false for the valid holder again,
-- NULL when refused; a lapsed holder campaigning again starts a new period.
SELECT acquired, new_period, holder FROM le_acquire('tok-np', 'a', '1 minute');
SELECT acquired, new_period, holder FROM le_acquire('tok-np', 'a', '1 minute');
SELECT acquired, new_period, holder FROM le_acquire('tok-np', 'b', '1 minute');
SELECT acquired, new_period FROM le_acquire('tok-np2', 'a', '20 milliseconds');
SELECT pg_sleep(0.05);
SELECT acquired, new_period FROM le_acquire('tok-np2', 'a', '1 minute');

-- History: every period that committed has its own token; no token twice,
-- and the rolled-back ones are absent.
SELECT lease_key, holder, fencing_token IN (:rolled_back, :sp_token, :rb2, :err_token) AS rolled_back_token
  FROM le_lease_history WHERE lease_key LIKE 'tok-%' ORDER BY lease_key, fencing_token;
SELECT count(*) = count(DISTINCT fencing_token) AS distinct_tokens
  FROM le_lease_history WHERE lease_key LIKE 'tok-%';

-- The sequence is the extension's, dumped with it, and closed to PUBLIC.
SELECT c.relname, d.deptype
  FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
 WHERE d.refclassid = 'pg_extension'::regclass AND c.relname = 'le_token_seq';
SELECT 'le_token_seq'::regclass = ANY (extconfig) AS dumped
  FROM pg_extension WHERE extname = 'leader_election';
SELECT has_sequence_privilege('public', 'le_token_seq', 'USAGE') AS public_usage,
       has_sequence_privilege('public', 'le_token_seq', 'UPDATE') AS public_update;

-- A sequence set back by hand below a key's last token (or restored older
-- than the lease rows): the grant raises the sequence first, so the token
-- is still above the key's last one, and the tokens after it rise again.
SELECT fencing_token AS np_token FROM le_leases WHERE lease_key = 'tok-np' \gset
SELECT le_force_release('tok-np');
SELECT setval('le_token_seq', 1);
SELECT acquired, new_period, fencing_token = :np_token + 1 AS just_above
  FROM le_acquire('tok-np', 'z', '1 minute');
SELECT last_value = :np_token + 1 AS sequence_raised FROM le_token_seq;
SELECT acquired, fencing_token > :np_token + 1 AS higher FROM le_acquire('tok-fresh', 'z', '1 minute');

-- The last token of a range cannot be followed (22003), and nothing changes.
SELECT le_force_release('tok-np');
UPDATE le_lease SET fencing_token = 9223372036854775807 WHERE lease_key = 'tok-np';
SELECT * FROM le_acquire('tok-np', 'y', '1 minute');
SELECT holder IS NULL AS still_free FROM le_leases WHERE lease_key = 'tok-np';

-- An exhausted le_token_seq (its MAXVALUE is the last low-bits value of a
-- token) is 22003 as well, not nextval's own 2200H, and nothing changes.
SELECT last_value AS seq_saved FROM le_token_seq \gset
SELECT setval('le_token_seq', 1099511627775) IS NOT NULL AS at_max;
SELECT * FROM le_acquire('tok-seq-max', 'y', '1 minute');
SELECT count(*) AS no_row FROM le_leases WHERE lease_key = 'tok-seq-max';
SELECT setval('le_token_seq', :seq_saved) IS NOT NULL AS restored;
SELECT acquired FROM le_acquire('tok-seq-max', 'y', '1 minute');

-- The one form for all columns: SELECT * FROM le_acquire(...) (or LATERAL)
-- calls the function once; a new period reports new_period = true.
-- (SELECT (le_acquire(...)).* would call it once per column.)
SELECT acquired, fencing_token > 0 AS has_token, holder, new_period
  FROM (SELECT * FROM le_acquire('star', 'a', '1 minute')) AS r;
SELECT transitions FROM le_leases WHERE lease_key = 'star';
SELECT k, r.acquired, r.new_period
  FROM (VALUES ('star-lateral')) AS v(k), LATERAL le_acquire(v.k, 'a', '1 minute') AS r;
SELECT transitions FROM le_leases WHERE lease_key = 'star-lateral';

-- G2, the server clock: a renewal or a repeated acquire inside a long
-- transaction extends the lease from the server clock at the call
-- (clock_timestamp()), never from the transaction's start (now()), which
-- may already lie further back than the ttl.

SELECT fencing_token AS clock_tok FROM le_acquire('clock', 'a', '1 hour') \gset
BEGIN;
SELECT pg_sleep(1.2);
SELECT le_renew('clock', 'a', :clock_tok, '1 second') > clock_timestamp() AS renewed_from_the_clock;
SELECT expires_at > clock_timestamp() AS extended_from_the_clock
  FROM le_acquire('clock', 'a', '1 second');
COMMIT;
SELECT le_release('clock', 'a', :clock_tok) AS released;
