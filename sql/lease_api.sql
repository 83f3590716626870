-- G1, G2, G3, G4: the lease API contract, on one session with clock-based expiry.
CREATE EXTENSION leader_election;
\set VERBOSITY terse

-- A free lease is granted with token 1; the reply names the holder.
SELECT acquired, fencing_token, holder, expires_at > clock_timestamp() AS in_future
  FROM le_acquire('billing', 'a', '10 seconds');

-- Another owner is refused: no token, the current holder and its expiry.
SELECT acquired, fencing_token, holder, expires_at > clock_timestamp() AS in_future
  FROM le_acquire('billing', 'b', '10 seconds');

-- The holder again (a retry after a lost reply): same token, later expiry.
SELECT expires_at AS first_expiry FROM le_leases WHERE lease_key = 'billing' \gset
SELECT pg_sleep(0.01);
SELECT acquired, fencing_token, holder, expires_at > :'first_expiry' AS extended
  FROM le_acquire('billing', 'a', '10 seconds');

-- Renew: new expiry for the right owner and token; NULL otherwise.
SELECT le_renew('billing', 'a', 1, '20 seconds') > clock_timestamp() + interval '15 seconds' AS renewed;
SELECT le_renew('billing', 'a', 2, '20 seconds') IS NULL AS wrong_token;
SELECT le_renew('billing', 'b', 1, '20 seconds') IS NULL AS wrong_owner;
SELECT le_renew('nosuchlease', 'a', 1) IS NULL AS no_lease;

-- Release: compare-and-release.
SELECT le_release('billing', 'b', 1) AS wrong_owner_released;
SELECT le_release('billing', 'a', 2) AS wrong_token_released;
SELECT le_release('billing', 'a', 1) AS released;
SELECT le_release('billing', 'a', 1) AS released_twice;
SELECT holder, fencing_token, is_valid, expires_at FROM le_leases WHERE lease_key = 'billing';

-- The next acquirer gets a higher token at once, without waiting for expiry.
SELECT acquired, fencing_token, holder FROM le_acquire('billing', 'b', '10 seconds');
SELECT le_renew('billing', 'a', 1) IS NULL AS old_holder_cannot_renew;
SELECT le_release('billing', 'a', 1) AS old_holder_cannot_release;

-- Expiry by the server clock: a 50 ms lease lapses, then anyone may take it
-- (a new token, even for the previous owner); renewal after expiry fails.
SELECT acquired, fencing_token FROM le_acquire('short', 'a', '50 milliseconds');
SELECT fencing_token AS short1 FROM le_leases WHERE lease_key OPERATOR(pg_catalog.=) 'short' \gset
SELECT pg_sleep(0.1);
SELECT le_renew('short', 'a', :short1) IS NULL AS expired_not_renewed;
SELECT acquired, fencing_token, holder FROM le_acquire('short', 'a', '10 seconds');
SELECT acquired, fencing_token, holder FROM le_acquire('short', 'b', '10 seconds');

-- Expiry is judged at call time, not at transaction start: inside one
-- transaction that outlives the lease, another owner gets it.
BEGIN;
SELECT acquired, fencing_token FROM le_acquire('inside', 'a', '50 milliseconds');
SELECT pg_sleep(0.1);
SELECT acquired, fencing_token, holder FROM le_acquire('inside', 'b', '10 seconds');
COMMIT;

-- le_leases and the history.
SELECT lease_key, holder, fencing_token, is_valid, seconds_remaining > 0 AS has_time,
       transitions, acquired_at <= renewed_at AS ordered
  FROM le_leases ORDER BY lease_key;
SELECT lease_key, holder, fencing_token, end_reason, ended_at IS NOT NULL AS ended
  FROM le_lease_history ORDER BY lease_key, fencing_token;

-- Admin release: the holder's token stops working, the next one is higher.
SELECT le_force_release('billing') AS forced;
SELECT le_force_release('billing') AS forced_again;
SELECT le_renew('billing', 'b', 2) IS NULL AS forced_holder_cannot_renew;
SELECT acquired, fencing_token FROM le_acquire('billing', 'c');
SELECT end_reason FROM le_lease_history WHERE lease_key = 'billing' AND fencing_token = 2;
