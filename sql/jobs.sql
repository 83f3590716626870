-- G10, scheduled jobs: exactly-once creation fenced by the lease,
-- claiming by workers without a lease, visibility timeout for vanished
-- workers, completion only by the claiming worker, retries with backoff up
-- to max_attempts (G5 and G6).  Backoff never overflows; the read-only view le_jobs and le_grant(role, 'work') for
-- worker roles, internal helpers not API (G8).  Tokens are captured
-- with \gset and compared, never written literally.
CREATE EXTENSION leader_election;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

SELECT acquired, fencing_token AS t1 FROM le_acquire('billing-scheduler', 'leader-1', '1 minute') \gset
\echo acquired :acquired

-- Created once: true, then false for the same schedule_key (idempotent retry).
SELECT le_schedule_job('billing-scheduler', :t1, 'billing:2026-12-01', 'billing',
                       clock_timestamp() - interval '1 minute', '{"region":"eu"}');
SELECT le_schedule_job('billing-scheduler', :t1, 'billing:2026-12-01', 'billing',
                       clock_timestamp() - interval '1 minute', '{"region":"us"}');
SELECT schedule_key, job_type, payload, status, attempts, max_attempts, fencing_token = :t1 AS by_t1
  FROM le_scheduled_jobs ORDER BY job_id;

-- A never issued token writes nothing (LE001); an unknown lease neither
-- (LE002).
\set VERBOSITY sqlstate
SELECT le_schedule_job('billing-scheduler', :t1 + 1, 'billing:stale', 'billing', clock_timestamp());
\set VERBOSITY terse
\echo :LAST_ERROR_SQLSTATE
SELECT le_schedule_job('no-such-lease', :t1, 'billing:unknown', 'billing', clock_timestamp());
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS jobs FROM le_scheduled_jobs;

-- Argument errors.
SELECT le_schedule_job('billing-scheduler', :t1, NULL, 'billing', clock_timestamp());
\echo :LAST_ERROR_SQLSTATE
SELECT le_schedule_job('billing-scheduler', :t1, '', 'billing', clock_timestamp());
\echo :LAST_ERROR_SQLSTATE
SELECT le_schedule_job('billing-scheduler', :t1, 'k', 'billing', clock_timestamp(), '{}', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT le_schedule_job('billing-scheduler', NULL, 'k', 'billing', clock_timestamp());
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM le_claim_jobs(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM le_claim_jobs('w', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM le_claim_jobs('w', 1, '-1 second');
\echo :LAST_ERROR_SQLSTATE

-- Jobs due later are not claimed yet; a job type filter applies.
SELECT le_schedule_job('billing-scheduler', :t1, 'later', 'billing', clock_timestamp() + interval '1 hour');
SELECT le_schedule_job('billing-scheduler', :t1, 'report:1', 'report', clock_timestamp() - interval '2 minutes');
SELECT schedule_key, status, attempts, claimed_by
  FROM le_claim_jobs('worker-7', 10, '1 minute', ARRAY['billing']);
-- Another worker gets the other due job; claimed jobs are not handed out
-- again while their claims last.
SELECT schedule_key, status, claimed_by FROM le_claim_jobs('worker-8', 10, '1 minute');
SELECT schedule_key, status, claimed_by FROM le_claim_jobs('worker-8', 10, '1 minute');

-- Completing a job you did not claim is refused (LE003), and so is an
-- unknown job (no claim on it either; the key is quoted cut to 64
-- characters).
SELECT le_complete_job('billing:2026-12-01', 'worker-8');
\echo :LAST_ERROR_SQLSTATE
SELECT le_complete_job('later', 'worker-7');
\echo :LAST_ERROR_SQLSTATE
SELECT le_complete_job('no-such-job', 'worker-7');
\echo :LAST_ERROR_SQLSTATE
SELECT le_fail_job(repeat('j', 100000), 'worker-7', 'boom');
\echo :LAST_ERROR_SQLSTATE
SELECT le_complete_job('billing:2026-12-01', 'worker-7');
-- Twice: the job is done, not claimed any more.
SELECT le_complete_job('billing:2026-12-01', 'worker-7');
\echo :LAST_ERROR_SQLSTATE
SELECT schedule_key, status, attempts, claimed_by, finished_at IS NOT NULL AS finished
  FROM le_scheduled_jobs ORDER BY job_id;

-- Visibility timeout: worker-8 vanishes with report:1; once its claim
-- lapses another worker gets the job (a new attempt), and worker-8 can no
-- longer complete it.
UPDATE le_scheduled_jobs SET available_at = clock_timestamp() - interval '1 second'
 WHERE schedule_key = 'report:1';
SELECT schedule_key, status, attempts, claimed_by, last_error
  FROM le_claim_jobs('worker-9', 10, '1 minute');
SELECT le_complete_job('report:1', 'worker-8');
\echo :LAST_ERROR_SQLSTATE

-- The same with a real (short) visibility timeout: poll until it lapses.
SELECT le_schedule_job('billing-scheduler', :t1, 'vt', 'vt', clock_timestamp() - interval '1 minute');
SELECT schedule_key, attempts FROM le_claim_jobs('worker-a', 1, '200 milliseconds', ARRAY['vt']);
DO $$
DECLARE deadline timestamptz := clock_timestamp() + interval '30 seconds';
BEGIN
    WHILE clock_timestamp() < deadline AND
          (SELECT available_at > clock_timestamp() FROM le_scheduled_jobs WHERE schedule_key = 'vt') LOOP
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT schedule_key, attempts, claimed_by, last_error FROM le_claim_jobs('worker-b', 1, '1 minute', ARRAY['vt']);

-- Failure: retried after retry_delay x 2^(attempts-1), then failed after
-- max_attempts.
SELECT le_schedule_job('billing-scheduler', :t1, 'flaky', 'flaky', clock_timestamp() - interval '1 minute',
                       '{}', 3);
SELECT attempts FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['flaky']);
SELECT le_fail_job('flaky', 'worker-8', 'not mine');
\echo :LAST_ERROR_SQLSTATE
SELECT le_fail_job('flaky', 'worker-7', 'timeout 1', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT le_fail_job('flaky', 'worker-7', 'timeout 1', '1 hour');
SELECT status, attempts, last_error,
       available_at BETWEEN clock_timestamp() + interval '59 minutes' AND clock_timestamp() + interval '61 minutes' AS backoff_1h
  FROM le_scheduled_jobs WHERE schedule_key = 'flaky';
-- Not claimable during the backoff.
SELECT count(*) AS claimed FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['flaky']);
-- Second attempt: the backoff doubles.
UPDATE le_scheduled_jobs SET available_at = clock_timestamp() WHERE schedule_key = 'flaky';
SELECT attempts FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['flaky']);
SELECT le_fail_job('flaky', 'worker-7', 'timeout 2', '1 hour');
SELECT status, attempts, last_error,
       available_at BETWEEN clock_timestamp() + interval '119 minutes' AND clock_timestamp() + interval '121 minutes' AS backoff_2h
  FROM le_scheduled_jobs WHERE schedule_key = 'flaky';
-- Third and last attempt fails for good.
UPDATE le_scheduled_jobs SET available_at = clock_timestamp() WHERE schedule_key = 'flaky';
SELECT attempts FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['flaky']);
SELECT le_fail_job('flaky', 'worker-7', 'timeout 3', '1 hour');
SELECT status, attempts, last_error, finished_at IS NOT NULL AS finished
  FROM le_scheduled_jobs WHERE schedule_key = 'flaky';
SELECT count(*) AS claimed FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['flaky']);

-- A worker that vanishes on the last attempt: the lapsed claim fails the job.
SELECT le_schedule_job('billing-scheduler', :t1, 'once', 'once', clock_timestamp() - interval '1 minute', '{}', 1);
SELECT attempts FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['once']);
UPDATE le_scheduled_jobs SET available_at = clock_timestamp() - interval '1 second' WHERE schedule_key = 'once';
SELECT count(*) AS claimed FROM le_claim_jobs('worker-8', 1, '1 minute', ARRAY['once']);
SELECT status, attempts, last_error FROM le_scheduled_jobs WHERE schedule_key = 'once';

-- G6: the backoff of a job failed 60+ times.  retry_delay x
-- 2^(attempts-1) overflowed the interval from about 41 attempts, so the
-- failure could not be recorded; it is capped at a day, and the next run is
-- in the future.  (attempts set directly to get there fast.)
SELECT le_schedule_job('billing-scheduler', :t1, 'many', 'many', clock_timestamp() - interval '1 minute',
                       '{}', 1000);
SELECT attempts FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['many']);
UPDATE le_scheduled_jobs SET attempts = 64 WHERE schedule_key = 'many';
SELECT le_fail_job('many', 'worker-7', 'attempt 64', '10 seconds');
SELECT status, attempts, last_error,
       available_at BETWEEN clock_timestamp() + interval '23 hours 59 minutes'
                        AND clock_timestamp() + interval '1 day' AS backoff_1d
  FROM le_scheduled_jobs WHERE schedule_key = 'many';
SELECT count(*) AS claimed FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['many']);
-- The largest delay and attempt count: still a day.
UPDATE le_scheduled_jobs SET available_at = clock_timestamp() WHERE schedule_key = 'many';
SELECT attempts FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['many']);
UPDATE le_scheduled_jobs SET attempts = 999 WHERE schedule_key = 'many';
SELECT le_fail_job('many', 'worker-7', 'attempt 999', '1 day');
SELECT status, attempts,
       available_at BETWEEN clock_timestamp() + interval '23 hours 59 minutes'
                        AND clock_timestamp() + interval '1 day' AS backoff_1d
  FROM le_scheduled_jobs WHERE schedule_key = 'many';
-- Small ones still double: attempt 3 with 1 second waits 4 seconds.
UPDATE le_scheduled_jobs SET available_at = clock_timestamp(), attempts = 2 WHERE schedule_key = 'many';
SELECT attempts FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['many']);
SELECT le_fail_job('many', 'worker-7', 'attempt 3', '1 second');
SELECT available_at BETWEEN clock_timestamp() + interval '3 seconds'
                        AND clock_timestamp() + interval '4 seconds' AS backoff_4s
  FROM le_scheduled_jobs WHERE schedule_key = 'many';
-- A zero retry_delay retries at once.
UPDATE le_scheduled_jobs SET available_at = clock_timestamp(), attempts = 70 WHERE schedule_key = 'many';
SELECT attempts FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['many']);
SELECT le_fail_job('many', 'worker-7', 'attempt 71', '0');
SELECT available_at <= clock_timestamp() AS due_now FROM le_scheduled_jobs WHERE schedule_key = 'many';

-- The job functions leave the caller's lock_timeout as it was (they bound
-- their own waits by leader_election.lock_timeout and restore it).
BEGIN;
SET LOCAL lock_timeout = '42s';
SELECT le_schedule_job('billing-scheduler', :t1, 'settings', 'settings', clock_timestamp() - interval '1 minute');
SELECT count(*) FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['settings']);
SELECT le_fail_job('settings', 'worker-7', 'once', '0');
SELECT count(*) FROM le_claim_jobs('worker-7', 1, '1 minute', ARRAY['settings']);
SELECT le_complete_job('settings', 'worker-7');
SELECT current_setting('lock_timeout') AS lock_timeout_in_transaction;
COMMIT;
SELECT current_setting('lock_timeout') AS lock_timeout_after;

-- After a takeover, the old leader's token creates nothing; the new one's does.
SELECT le_release('billing-scheduler', 'leader-1', :t1);
SELECT acquired, fencing_token AS t2 FROM le_acquire('billing-scheduler', 'leader-2', '1 minute') \gset
SELECT :'acquired' AS acquired, :t2 > :t1 AS higher_token;
\set VERBOSITY sqlstate
SELECT le_schedule_job('billing-scheduler', :t1, 'billing:2026-12-02', 'billing', clock_timestamp());
\set VERBOSITY terse
\echo :LAST_ERROR_SQLSTATE
SELECT le_schedule_job('billing-scheduler', :t2, 'billing:2026-12-02', 'billing', clock_timestamp());
SELECT schedule_key, fencing_token = :t1 AS by_t1, fencing_token = :t2 AS by_t2
  FROM le_scheduled_jobs WHERE schedule_key LIKE 'billing:%' ORDER BY job_id;

-- The pattern for users' own tables: fence check + INSERT ... ON CONFLICT
-- DO NOTHING in one transaction.
CREATE TABLE my_jobs (schedule_key text PRIMARY KEY, fencing_token bigint NOT NULL);
BEGIN;
SELECT le_fence_check('billing-scheduler', :t2);
INSERT INTO my_jobs VALUES ('daily:2026-12-01', :t2) ON CONFLICT (schedule_key) DO NOTHING;
COMMIT;
BEGIN;
\set VERBOSITY sqlstate
SELECT le_fence_check('billing-scheduler', :t1);
\set VERBOSITY terse
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT schedule_key, fencing_token = :t2 AS by_t2 FROM my_jobs;

-- Ordinary roles have no direct access to the jobs table, nor to the view
-- of it, before a grant.
CREATE ROLE regress_le_worker;
SET ROLE regress_le_worker;
SELECT count(*) FROM le_scheduled_jobs;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_jobs;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM le_claim_jobs('w');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- G8: one call gives a worker role all it needs: claim,
-- complete, fail, and read the jobs through le_jobs.
SELECT le_grant('regress_le_worker', 'work');
SELECT le_schedule_job('billing-scheduler', :t2, 'billing:2026-12-03', 'billing', clock_timestamp() - interval '1 second');
SET ROLE regress_le_worker;
SELECT schedule_key FROM le_claim_jobs('w', 10, '1 minute', ARRAY['billing']) ORDER BY 1;
SELECT le_complete_job('billing:2026-12-02', 'w');
SELECT le_fail_job('billing:2026-12-03', 'w', 'no ink', '1 hour');
SELECT schedule_key, status, attempts, claimed_by, last_error, fencing_token = :t2 AS by_t2,
       created_at <= clock_timestamp() AS created, finished_at IS NOT NULL AS finished
  FROM le_jobs WHERE schedule_key LIKE 'billing:%' ORDER BY job_id;
-- While a claim lasts, claimed_until says until when.
SELECT schedule_key, status, claimed_by,
       claimed_until BETWEEN clock_timestamp() AND clock_timestamp() + interval '1 minute' AS claim_lasts
  FROM le_jobs WHERE status = 'running' ORDER BY job_id;
-- The view is read-only and has no payload; the table and the internal
-- helpers stay closed.
SELECT payload FROM le_jobs;
\echo :LAST_ERROR_SQLSTATE
UPDATE le_jobs SET status = 'done';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_scheduled_jobs;
\echo :LAST_ERROR_SQLSTATE
SELECT _le_lock_claimed_job('billing:2026-12-03', 'w');
\echo :LAST_ERROR_SQLSTATE
SELECT _le_check_worker('w');
\echo :LAST_ERROR_SQLSTATE
-- Not granted by 'work': scheduling (that is 'schedule').
SELECT le_schedule_job('billing-scheduler', :t2, 'billing:2026-12-04', 'billing', clock_timestamp());
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT le_revoke('regress_le_worker', 'work');
SET ROLE regress_le_worker;
SELECT count(*) FROM le_jobs;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP TABLE my_jobs;
DROP EXTENSION leader_election;
DROP ROLE regress_le_worker;
