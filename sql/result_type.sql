-- le_acquire returns the named composite type le_acquire_result.  Its
-- owner (or a superuser) can alter it: attributes renamed or added give a
-- documented 55000 before anything is changed (no token drawn); an
-- attribute added and dropped again is skipped, the answer stays right.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY default

SELECT last_value AS seq_before FROM le_token_seq \gset
BEGIN;
ALTER TYPE le_acquire_result RENAME ATTRIBUTE acquired TO x;
ALTER TYPE le_acquire_result RENAME ATTRIBUTE new_period TO acquired;
ALTER TYPE le_acquire_result RENAME ATTRIBUTE x TO new_period;
SELECT * FROM le_acquire('err-type', 'a', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
ALTER TYPE le_acquire_result ADD ATTRIBUTE extra int;
SELECT * FROM le_acquire('err-type', 'a', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT last_value = :seq_before AS no_token_drawn FROM le_token_seq;
BEGIN;
ALTER TYPE le_acquire_result ADD ATTRIBUTE extra int;
ALTER TYPE le_acquire_result DROP ATTRIBUTE extra;
SELECT acquired, holder, new_period FROM le_acquire('err-type', 'a', '1 minute');
SELECT (le_acquire('err-type', 'b', '1 minute')).holder AS refused_by;
ROLLBACK;

