-- G14, G8: le_lease_metrics counts periods, expiries and force releases in the
-- lease row, so the counts outlive the pruned history, and shows the time a
-- lease had left when each renewal arrived.  Without the module in
-- shared_preload_libraries no refused write is counted, and the server
-- says so: le_fence_refusals_counted() is false and le_fence_refusals is
-- empty, even after a refusal.  Only le_grant(role, 'monitor') opens them.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

-- A fresh grant: one period, nothing ended, no renewal yet.
SELECT acquired, new_period FROM le_acquire('metrics-a', 'a', '10 seconds');
SELECT holder, is_valid, ttl_seconds, periods_granted, expiries, force_releases,
       renew_margin_seconds, renew_margin_min_seconds, seconds_without_holder
  FROM le_lease_metrics WHERE lease_key = 'metrics-a';

-- A renewal 0.2 s into the period saw 9.8 s left (at most); the next one,
-- right after it, saw nearly the full 20 s: the last margin rises, the least
-- stays.
SELECT pg_sleep(0.2);
SELECT le_renew('metrics-a', 'a', fencing_token, '20 seconds') IS NOT NULL AS renewed
  FROM le_leases WHERE lease_key = 'metrics-a';
SELECT renew_margin_seconds < 9.8 AND renew_margin_seconds > 5 AS margin_seen,
       renew_margin_min_seconds = renew_margin_seconds AS least_is_last,
       ttl_seconds
  FROM le_lease_metrics WHERE lease_key = 'metrics-a';
SELECT le_renew('metrics-a', 'a', fencing_token, '20 seconds') IS NOT NULL AS renewed
  FROM le_leases WHERE lease_key = 'metrics-a';
SELECT renew_margin_seconds > 19 AS margin_near_ttl,
       renew_margin_min_seconds < 9.8 AS least_kept
  FROM le_lease_metrics WHERE lease_key = 'metrics-a';

-- The holder extends its own lease with le_acquire: the same period, with
-- the new ttl.
SELECT acquired, new_period FROM le_acquire('metrics-a', 'a', '45 seconds');
SELECT ttl_seconds, periods_granted, renew_margin_min_seconds < 9.8 AS least_kept
  FROM le_lease_metrics WHERE lease_key = 'metrics-a';

-- A force release of a valid lease: counted as such, not as an expiry; the
-- ttl shown is that of the period that ended, and no renewal margin is left.
SELECT le_force_release('metrics-a');
SELECT holder, is_valid, seconds_remaining, periods_granted, expiries, force_releases,
       seconds_without_holder < 5 AS freed_just_now, ttl_seconds,
       renew_margin_seconds, renew_margin_min_seconds
  FROM le_lease_metrics WHERE lease_key = 'metrics-a';

-- A new period resets the margins.
SELECT acquired, new_period FROM le_acquire('metrics-a', 'b', '10 seconds');
SELECT holder, periods_granted, renew_margin_seconds, renew_margin_min_seconds
  FROM le_lease_metrics WHERE lease_key = 'metrics-a';

-- A lapsed period is an expiry at once in the view, and stays one when
-- another owner takes the lease over.
SELECT acquired FROM le_acquire('metrics-b', 'a', '1 second');
SELECT pg_sleep(1.1);
SELECT holder, is_valid, expiries, seconds_without_holder > 0 AS unheld
  FROM le_lease_metrics WHERE lease_key = 'metrics-b';
SELECT acquired, new_period FROM le_acquire('metrics-b', 'b', '10 seconds');
SELECT holder, periods_granted, expiries, force_releases, seconds_without_holder
  FROM le_lease_metrics WHERE lease_key = 'metrics-b';

-- A release after the lapse is an expiry too (as in the history).
SELECT acquired FROM le_acquire('metrics-c', 'a', '1 second');
SELECT pg_sleep(1.1);
SELECT le_release('metrics-c', 'a', fencing_token) FROM le_leases WHERE lease_key = 'metrics-c';
SELECT expiries, force_releases FROM le_lease_metrics WHERE lease_key = 'metrics-c';
SELECT end_reason FROM le_lease_history h JOIN le_lease l USING (lease_id)
 WHERE l.lease_key = 'metrics-c';

-- The counts outlive the history: pruned to nothing, the counts stay.
SET leader_election.history_retention = 0;
SELECT le_release('metrics-b', 'b', fencing_token) FROM le_leases WHERE lease_key = 'metrics-b';
SELECT le_release('metrics-a', 'b', fencing_token) FROM le_leases WHERE lease_key = 'metrics-a';
SELECT le_prune_history() > 0 AS pruned;
SELECT count(*) AS history_rows FROM le_lease_history WHERE lease_key LIKE 'metrics-%';
SELECT lease_key, periods_granted, expiries, force_releases
  FROM le_lease_metrics WHERE lease_key LIKE 'metrics-%' ORDER BY lease_key;
RESET leader_election.history_retention;

-- Not preloaded: nothing counted, and the server says so, even after a
-- write the fence refused.
SELECT le_fence_refusals_counted();
SELECT acquired FROM le_acquire('metrics-fence', 'a', '10 seconds');
\set VERBOSITY sqlstate
SELECT le_fence_check('metrics-fence', fencing_token + 1) FROM le_leases
 WHERE lease_key = 'metrics-fence';
\set VERBOSITY terse
SELECT count(*) AS refusal_rows FROM le_fence_refusals;

-- Readable only through the monitor use.
CREATE ROLE regress_le_watcher;
SET ROLE regress_le_watcher;
SELECT count(*) FROM le_lease_metrics;
SELECT count(*) FROM le_fence_refusals;
RESET ROLE;
SELECT count(*) > 0 AS granted FROM le_grant('regress_le_watcher', 'monitor');
SET ROLE regress_le_watcher;
SELECT count(*) AS leases FROM le_lease_metrics WHERE lease_key LIKE 'metrics-%';
SELECT count(*) AS refusal_rows FROM le_fence_refusals;
SELECT le_fence_refusals_counted();
RESET ROLE;
SELECT count(*) > 0 AS revoked FROM le_revoke('regress_le_watcher', 'monitor');
DROP ROLE regress_le_watcher;
