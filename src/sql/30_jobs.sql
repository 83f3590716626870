-- ---------------------------------------------------------------------------
-- Scheduled jobs: exactly-once creation of scheduled work by the leader,
-- and claiming by any number of workers.
--
-- The work is PL/pgSQL, not C: each is one fence check (the C function
-- le_fence_check, the part that must be fast and race-free) and one or two
-- statements on le_scheduled_jobs in the caller's transaction; the
-- statements would be the same through SPI.  Each API function is a C
-- entry point (le_call_worker in src/sql_support.c) that runs its _le_*
-- worker with the search path pinned to this schema by OID, so the
-- workers' unqualified names cannot be redirected by a rename of the
-- schema.  The workers are SECURITY DEFINER because ordinary roles have no
-- privileges on le_scheduled_jobs; every value reaches SQL as a parameter.
--
-- Locking rules.  le_schedule_job takes the lease's fence lock (through
-- le_fence_check) before it inserts, so a job created with token T never
-- commits after the grant of a later token; two schedulers racing on one
-- schedule_key are serialised by its unique index and the loser gets false.
-- Workers need no lease: le_claim_jobs locks due rows FOR UPDATE SKIP
-- LOCKED, so concurrent workers never get the same job; complete and fail
-- lock the job's row and check that the caller still holds the claim.
--
-- Bounded waits.  Two statements can wait for another transaction: the
-- INSERT of le_schedule_job (a concurrent, uncommitted creation of the same
-- schedule_key) and the row lock of complete and fail (a transaction that
-- completes, fails or claims the same job and has not ended).  Each runs in
-- a block that applies _le_lock_wait_bound() as lock_timeout (SET LOCAL,
-- restored right after the statement, undone with the block's
-- subtransaction on error, so the caller's setting is what it was) and
-- turns lock_not_available into a 55P03 that names the job and the
-- setting.  complete and fail first try the row lock with SKIP LOCKED, so
-- their uncontended path needs no subtransaction and changes no setting.
-- ---------------------------------------------------------------------------

CREATE TABLE @extschema@.le_scheduled_jobs (
    job_id          bigint      GENERATED ALWAYS AS IDENTITY,
    schedule_key    text        NOT NULL,
    job_type        text        NOT NULL,
    scheduled_for   timestamptz NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}',
    lease_key       text        NOT NULL,
    fencing_token   bigint      NOT NULL,
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL,
    available_at    timestamptz NOT NULL,
    claimed_by      text,
    claimed_at      timestamptz,
    finished_at     timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT le_scheduled_jobs_pkey PRIMARY KEY (job_id),
    CONSTRAINT le_scheduled_jobs_schedule_key UNIQUE (schedule_key),
    CONSTRAINT le_scheduled_jobs_status CHECK (status IN ('pending', 'running', 'done', 'failed')),
    CONSTRAINT le_scheduled_jobs_attempts CHECK (attempts >= 0 AND max_attempts >= 1)
);
CREATE INDEX le_scheduled_jobs_due ON @extschema@.le_scheduled_jobs (available_at)
    WHERE status IN ('pending', 'running');
COMMENT ON TABLE @extschema@.le_scheduled_jobs IS
    'scheduled work created exactly once per schedule_key by a fenced leader (le_schedule_job) and run by workers (le_claim_jobs, le_complete_job, le_fail_job)';
COMMENT ON COLUMN @extschema@.le_scheduled_jobs.available_at IS
    'pending: when the job may be claimed (scheduled_for, or later after a failure); running: when the claim lapses and another worker may take the job (visibility timeout)';
COMMENT ON COLUMN @extschema@.le_scheduled_jobs.fencing_token IS
    'token of the leader that created the job (checked by the fence at creation)';
SELECT pg_catalog.pg_extension_config_dump('le_scheduled_jobs', '');
-- The identity sequence too, or restored job_ids would be handed out again.
SELECT pg_catalog.pg_extension_config_dump('le_scheduled_jobs_job_id_seq', '');
REVOKE ALL ON @extschema@.le_scheduled_jobs FROM PUBLIC;

CREATE FUNCTION @extschema@._le_schedule_job(
    lease_key text,
    fencing_token bigint,
    schedule_key text,
    job_type text,
    scheduled_for timestamptz,
    payload jsonb,
    max_attempts integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    saved text;
    bound text;
    created bigint;
BEGIN
    IF schedule_key IS NULL OR job_type IS NULL OR scheduled_for IS NULL
       OR payload IS NULL OR max_attempts IS NULL THEN
        RAISE EXCEPTION 'schedule_key, job_type, scheduled_for, payload and max_attempts must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF schedule_key OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(schedule_key) OPERATOR(pg_catalog.>) 200
       OR job_type OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'schedule_key must be 1 to 200 bytes long and job_type not empty'
            USING ERRCODE = '22023';
    END IF;
    IF max_attempts OPERATOR(pg_catalog.<) 1 OR max_attempts OPERATOR(pg_catalog.>) 1000 THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000, got %', max_attempts
            USING ERRCODE = '22023';
    END IF;

    -- The fence first: its lock is kept until the end of the transaction.
    PERFORM le_fence_check(lease_key, fencing_token);

    -- The INSERT waits when another transaction is creating the same
    -- schedule_key: boundedly.
    BEGIN
        saved := pg_catalog.current_setting('lock_timeout');
        bound := _le_lock_wait_bound();
        PERFORM pg_catalog.set_config('lock_timeout', bound, true);
        INSERT INTO le_scheduled_jobs AS j
            (schedule_key, job_type, scheduled_for, payload, lease_key, fencing_token,
             max_attempts, available_at)
        VALUES (schedule_key, job_type, scheduled_for, payload, lease_key, fencing_token,
                max_attempts, scheduled_for)
        ON CONFLICT ON CONSTRAINT le_scheduled_jobs_schedule_key DO NOTHING;
        GET DIAGNOSTICS created = ROW_COUNT;
        PERFORM pg_catalog.set_config('lock_timeout', saved, true);
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'job "%" is being created by another transaction', schedule_key
            USING ERRCODE = '55P03',
                  DETAIL = 'A transaction that scheduled the same schedule_key has not ended.',
                  HINT = pg_catalog.format('Waits are bounded by leader_election.lock_timeout, or by your lock_timeout when shorter (here %s ms); look for an idle-in-transaction or prepared transaction in pg_stat_activity and pg_prepared_xacts.', bound);
    END;
    RETURN created OPERATOR(pg_catalog.>) 0;
END
$$;
COMMENT ON FUNCTION @extschema@._le_schedule_job(text, bigint, text, text, timestamptz, jsonb, integer) IS
    'internal, not API: the work of le_schedule_job(), run by its C entry point with the search path pinned to the extension''s schema by OID; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_schedule_job(text, bigint, text, text, timestamptz, jsonb, integer) FROM PUBLIC;

-- The entry point: C, which runs _le_schedule_job() with names resolved in this
-- schema by OID, whatever it is called now (src/sql_support.c).
CREATE FUNCTION @extschema@.le_schedule_job(
    lease_key text,
    fencing_token bigint,
    schedule_key text,
    job_type text,
    scheduled_for timestamptz,
    payload jsonb DEFAULT '{}',
    max_attempts integer DEFAULT 5)
RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_call_worker';
COMMENT ON FUNCTION @extschema@.le_schedule_job(text, bigint, text, text, timestamptz, jsonb, integer) IS
    'create a job once per schedule_key, fenced by the lease: true when created, false when that schedule_key exists already (an idempotent retry), LE001/LE002 and nothing written when the token is not current; waits at most leader_election.lock_timeout for a concurrent creation of the same schedule_key (55P03)';
REVOKE ALL ON FUNCTION @extschema@.le_schedule_job(text, bigint, text, text, timestamptz, jsonb, integer) FROM PUBLIC;

-- An input value as error messages quote it: whole up to 64 characters,
-- else its first 64 characters followed by "... (N bytes)", so that no
-- message repeats megabytes of input.  The same rule as le_check_show() in
-- C (src/check.c).
CREATE FUNCTION @extschema@._le_show(value text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN pg_catalog.length(value) OPERATOR(pg_catalog.<=) 64 THEN value
            ELSE pg_catalog.left(value, 64) OPERATOR(pg_catalog.||)
                 pg_catalog.format('... (%s bytes)', pg_catalog.octet_length(value)) END
$$;
COMMENT ON FUNCTION @extschema@._le_show(text) IS
    'internal, not API: an input value cut to 64 characters for an error message; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_show(text) FROM PUBLIC;

-- Check a worker id argument.
CREATE FUNCTION @extschema@._le_check_worker(worker_id text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF worker_id IS NULL THEN
        RAISE EXCEPTION 'worker_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF worker_id OPERATOR(pg_catalog.=) '' OR pg_catalog.octet_length(worker_id) OPERATOR(pg_catalog.>) 200 THEN
        RAISE EXCEPTION 'worker_id must be 1 to 200 bytes long' USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@._le_check_worker(text) IS
    'internal, not API: argument check shared by the job functions; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_check_worker(text) FROM PUBLIC;

CREATE FUNCTION @extschema@._le_claim_jobs(
    worker_id text,
    max_jobs integer,
    visibility_timeout interval,
    job_types text[])
RETURNS TABLE (
    job_id          bigint,
    schedule_key    text,
    job_type        text,
    scheduled_for   timestamptz,
    payload         jsonb,
    lease_key       text,
    fencing_token   bigint,
    status          text,
    attempts        integer,
    max_attempts    integer,
    available_at    timestamptz,
    claimed_by      text,
    claimed_at      timestamptz,
    finished_at     timestamptz,
    last_error      text,
    created_at      timestamptz)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM _le_check_worker(worker_id);
    IF max_jobs IS NULL OR visibility_timeout IS NULL THEN
        RAISE EXCEPTION 'max_jobs and visibility_timeout must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF max_jobs OPERATOR(pg_catalog.<) 1 OR max_jobs OPERATOR(pg_catalog.>) 10000 THEN
        RAISE EXCEPTION 'max_jobs must be between 1 and 10000, got %', max_jobs USING ERRCODE = '22023';
    END IF;
    IF visibility_timeout OPERATOR(pg_catalog.<=) interval '0' OR visibility_timeout OPERATOR(pg_catalog.>) interval '7 days' THEN
        RAISE EXCEPTION 'visibility_timeout must be positive and at most 7 days' USING ERRCODE = '22023';
    END IF;

    -- Claims that lapsed on their last attempt: the job has failed.
    UPDATE le_scheduled_jobs AS j
       SET status = 'failed', finished_at = now,
           last_error = pg_catalog.format('claim by worker %s lapsed on attempt %s of %s', j.claimed_by, j.attempts, j.max_attempts)
     WHERE j.job_id IN (SELECT l.job_id FROM le_scheduled_jobs AS l
                         WHERE l.status OPERATOR(pg_catalog.=) 'running'
                           AND l.available_at OPERATOR(pg_catalog.<=) now
                           AND l.attempts OPERATOR(pg_catalog.>=) l.max_attempts
                           FOR UPDATE SKIP LOCKED);

    -- Due jobs, and jobs whose worker vanished (claim lapsed), oldest first.
    RETURN QUERY
    UPDATE le_scheduled_jobs AS j
       SET status = 'running', claimed_by = worker_id, claimed_at = now,
           available_at = now OPERATOR(pg_catalog.+) visibility_timeout,
           attempts = j.attempts OPERATOR(pg_catalog.+) 1,
           last_error = CASE WHEN j.status OPERATOR(pg_catalog.=) 'running'
                             THEN pg_catalog.format('claim by worker %s lapsed', j.claimed_by)
                             ELSE j.last_error END
      FROM (SELECT d.job_id FROM le_scheduled_jobs AS d
             WHERE d.status IN ('pending', 'running')
               AND d.available_at OPERATOR(pg_catalog.<=) now
               AND d.attempts OPERATOR(pg_catalog.<) d.max_attempts
               AND (job_types IS NULL OR d.job_type OPERATOR(pg_catalog.=) ANY (job_types))
             ORDER BY d.available_at, d.job_id
             LIMIT max_jobs
             FOR UPDATE SKIP LOCKED) AS due
     WHERE j.job_id OPERATOR(pg_catalog.=) due.job_id
    RETURNING j.*;
END
$$;
COMMENT ON FUNCTION @extschema@._le_claim_jobs(text, integer, interval, text[]) IS
    'internal, not API: the work of le_claim_jobs(), run by its C entry point with the search path pinned to the extension''s schema by OID; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_claim_jobs(text, integer, interval, text[]) FROM PUBLIC;

-- The entry point: C, which runs _le_claim_jobs() with names resolved in this
-- schema by OID, whatever it is called now (src/sql_support.c).
CREATE FUNCTION @extschema@.le_claim_jobs(
    worker_id text,
    max_jobs integer DEFAULT 1,
    visibility_timeout interval DEFAULT '5 minutes',
    job_types text[] DEFAULT NULL)
-- The columns of le_scheduled_jobs, spelt out rather than SETOF its row
-- type: a caller resolving a row type opens the table while parsing its
-- query, before any lock of ours, and so would fail with an internal error
-- (XX000 "could not open relation") after a concurrent DROP EXTENSION
-- committed; with a column list it gets 42P01 from the statements of
-- _le_claim_jobs.
RETURNS TABLE (
    job_id          bigint,
    schedule_key    text,
    job_type        text,
    scheduled_for   timestamptz,
    payload         jsonb,
    lease_key       text,
    fencing_token   bigint,
    status          text,
    attempts        integer,
    max_attempts    integer,
    available_at    timestamptz,
    claimed_by      text,
    claimed_at      timestamptz,
    finished_at     timestamptz,
    last_error      text,
    created_at      timestamptz)
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_call_worker';
COMMENT ON FUNCTION @extschema@.le_claim_jobs(text, integer, interval, text[]) IS
    'claim up to max_jobs due jobs for worker_id (FOR UPDATE SKIP LOCKED: each job goes to one worker); a claim not completed or failed within visibility_timeout lapses and the job can be claimed again (it counts as an attempt)';
REVOKE ALL ON FUNCTION @extschema@.le_claim_jobs(text, integer, interval, text[]) FROM PUBLIC;

-- Lock a job's row and check that worker_id holds its claim; returns it.
-- SKIP LOCKED first: a job nobody else holds is locked without a
-- subtransaction or a setting change; otherwise (or when it does not exist)
-- wait for the row lock, at most _le_lock_wait_bound().
CREATE FUNCTION @extschema@._le_lock_claimed_job(schedule_key text, worker_id text)
RETURNS @extschema@.le_scheduled_jobs
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    job le_scheduled_jobs;
    saved text;
    bound text;
BEGIN
    PERFORM _le_check_worker(worker_id);
    IF schedule_key IS NULL THEN
        RAISE EXCEPTION 'schedule_key must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT * INTO job FROM le_scheduled_jobs AS j
     WHERE j.schedule_key OPERATOR(pg_catalog.=) _le_lock_claimed_job.schedule_key
       FOR UPDATE SKIP LOCKED;
    IF job.job_id IS NULL THEN
        BEGIN
            saved := pg_catalog.current_setting('lock_timeout');
            bound := _le_lock_wait_bound();
            PERFORM pg_catalog.set_config('lock_timeout', bound, true);
            SELECT * INTO job FROM le_scheduled_jobs AS j
             WHERE j.schedule_key OPERATOR(pg_catalog.=) _le_lock_claimed_job.schedule_key
               FOR UPDATE;
            PERFORM pg_catalog.set_config('lock_timeout', saved, true);
        EXCEPTION WHEN lock_not_available THEN
            RAISE EXCEPTION 'job "%" is locked by another transaction', _le_show(schedule_key)
                USING ERRCODE = '55P03',
                      DETAIL = 'A transaction that completes, fails or claims this job has not ended.',
                      HINT = pg_catalog.format('Waits are bounded by leader_election.lock_timeout, or by your lock_timeout when shorter (here %s ms); look for an idle-in-transaction or prepared transaction in pg_stat_activity and pg_prepared_xacts.', bound);
        END;
        -- No such job: the worker holds no claim on it either (LE003).
        IF job.job_id IS NULL THEN
            RAISE EXCEPTION 'job "%" is not claimed by worker "%"', _le_show(schedule_key), worker_id
                USING ERRCODE = 'LE003',
                      DETAIL = 'No job has that schedule_key.',
                      HINT = 'Complete or fail only the jobs that le_claim_jobs() returned to this worker.';
        END IF;
    END IF;
    IF job.status OPERATOR(pg_catalog.<>) 'running' OR job.claimed_by OPERATOR(pg_catalog.<>) worker_id THEN
        RAISE EXCEPTION 'job "%" is not claimed by worker "%"', _le_show(schedule_key), worker_id
            USING ERRCODE = 'LE003',
                  DETAIL = pg_catalog.format('Its status is %s, last claimed by %s.', job.status,
                                             COALESCE(job.claimed_by, 'nobody')),
                  HINT = 'Only the worker holding the claim may complete or fail a job; a worker whose claim lapsed (visibility timeout) must assume the job runs again elsewhere.';
    END IF;
    RETURN job;
END
$$;
COMMENT ON FUNCTION @extschema@._le_lock_claimed_job(text, text) IS
    'internal, not API: lock a job''s row (waiting at most leader_election.lock_timeout, 55P03) and raise LE003 unless worker_id holds its claim; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_lock_claimed_job(text, text) FROM PUBLIC;

CREATE FUNCTION @extschema@._le_complete_job(schedule_key text, worker_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    job le_scheduled_jobs := _le_lock_claimed_job(schedule_key, worker_id);
BEGIN
    UPDATE le_scheduled_jobs AS j
       SET status = 'done', finished_at = pg_catalog.clock_timestamp()
     WHERE j.job_id OPERATOR(pg_catalog.=) job.job_id;
END
$$;
COMMENT ON FUNCTION @extschema@._le_complete_job(text, text) IS
    'internal, not API: the work of le_complete_job(), run by its C entry point with the search path pinned to the extension''s schema by OID; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_complete_job(text, text) FROM PUBLIC;

-- The entry point: C, which runs _le_complete_job() with names resolved in this
-- schema by OID, whatever it is called now (src/sql_support.c).
CREATE FUNCTION @extschema@.le_complete_job(schedule_key text, worker_id text)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_call_worker';
COMMENT ON FUNCTION @extschema@.le_complete_job(text, text) IS
    'mark a job done; raises LE003 when worker_id does not hold its claim (never claimed, claimed by another worker, or already finished); waits at most leader_election.lock_timeout for the job''s row (55P03)';
REVOKE ALL ON FUNCTION @extschema@.le_complete_job(text, text) FROM PUBLIC;

CREATE FUNCTION @extschema@._le_fail_job(
    schedule_key text,
    worker_id text,
    error text,
    retry_delay interval)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    job le_scheduled_jobs := _le_lock_claimed_job(schedule_key, worker_id);
    now timestamptz := pg_catalog.clock_timestamp();
    delay interval;
BEGIN
    IF retry_delay IS NULL OR retry_delay OPERATOR(pg_catalog.<) interval '0'
       OR retry_delay OPERATOR(pg_catalog.>) interval '1 day' THEN
        RAISE EXCEPTION 'retry_delay must be between 0 and 1 day' USING ERRCODE = '22023';
    END IF;
    IF job.attempts OPERATOR(pg_catalog.>=) job.max_attempts THEN
        UPDATE le_scheduled_jobs AS j
           SET status = 'failed', finished_at = now, last_error = error
         WHERE j.job_id OPERATOR(pg_catalog.=) job.job_id;
        RETURN 'failed';
    END IF;
    -- Exponential backoff: retry_delay, 2 x retry_delay, 4 x ..., at most a
    -- day.  Computed in numeric seconds with the exponent capped at 40
    -- (even 1 microsecond x 2^40 is more than a day), so no attempt count
    -- overflows an interval.
    delay := pg_catalog.make_interval(secs => LEAST(
                 pg_catalog.date_part('epoch', retry_delay)::pg_catalog.numeric
                 OPERATOR(pg_catalog.*) pg_catalog.power(2::pg_catalog.numeric,
                     LEAST(GREATEST(job.attempts OPERATOR(pg_catalog.-) 1, 0), 40)),
                 86400)::double precision);
    UPDATE le_scheduled_jobs AS j
       SET status = 'pending', available_at = now OPERATOR(pg_catalog.+) delay, last_error = error
     WHERE j.job_id OPERATOR(pg_catalog.=) job.job_id;
    RETURN 'pending';
END
$$;
COMMENT ON FUNCTION @extschema@._le_fail_job(text, text, text, interval) IS
    'internal, not API: the work of le_fail_job(), run by its C entry point with the search path pinned to the extension''s schema by OID; not executable by PUBLIC';
REVOKE ALL ON FUNCTION @extschema@._le_fail_job(text, text, text, interval) FROM PUBLIC;

-- The entry point: C, which runs _le_fail_job() with names resolved in this
-- schema by OID, whatever it is called now (src/sql_support.c).
CREATE FUNCTION @extschema@.le_fail_job(
    schedule_key text,
    worker_id text,
    error text,
    retry_delay interval DEFAULT '10 seconds')
RETURNS text
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_call_worker';
COMMENT ON FUNCTION @extschema@.le_fail_job(text, text, text, interval) IS
    'record a failed attempt: the job is retried after retry_delay x 2^(attempts-1), at most a day, while attempts < max_attempts, else it becomes failed; returns the new status; LE003 when worker_id does not hold the claim; waits at most leader_election.lock_timeout for the job''s row (55P03)';
REVOKE ALL ON FUNCTION @extschema@.le_fail_job(text, text, text, interval) FROM PUBLIC;

-- What application roles may see of the jobs: everything but the payload,
-- which may carry data meant only for the worker that claims the job (it
-- gets it from le_claim_jobs).  Not readable by PUBLIC; le_grant(role,
-- 'work') or le_grant(role, 'monitor') grants it.
CREATE VIEW @extschema@.le_jobs AS
SELECT j.job_id, j.schedule_key, j.job_type, j.scheduled_for, j.lease_key,
       j.fencing_token, j.created_at, j.status, j.attempts, j.max_attempts,
       j.available_at, j.claimed_by, j.claimed_at,
       CASE WHEN j.status OPERATOR(pg_catalog.=) 'running' THEN j.available_at END AS claimed_until,
       j.finished_at, j.last_error
  FROM @extschema@.le_scheduled_jobs AS j;
COMMENT ON VIEW @extschema@.le_jobs IS
    'read-only view of le_scheduled_jobs without the payload: status, attempts, creating lease, token and time, claim holder and until when it lasts, last error; not readable by PUBLIC (le_grant(role, ''monitor''))';
REVOKE ALL ON @extschema@.le_jobs FROM PUBLIC;
