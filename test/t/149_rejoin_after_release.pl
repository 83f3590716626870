# G15, G1: a holder frees its lease (a member leaving its group, or a
# plain release) while the same member id or owner, in another session,
# waits for that row to renew it.  The waiter wakes when the freeing
# transaction's row lock goes, and may find its fence lock still held for
# a moment: PostgreSQL releases a transaction's locks one lock-table
# partition after the other, and one holding many locks (here 2,000
# advisory locks) takes a while to release them all.  The waiter must then
# take the lease anew, never get 55P03 ("membership is busy") or a refusal
# of a lease nobody holds.  Two ways to free it:
#   commit    the freeing transaction commits (1,000 times);
#   slow commit  the same with 200,000 locks (30 times): giving them back
#             takes longer than a running holder is waited for, so the
#             waiter must see that the holder's transaction has ended;
#   savepoint a subtransaction frees it, holds the row past the lease's
#             expiry and rolls back (an exception block) in a transaction
#             that goes on, so the locks go while its transaction still
#             runs (20 times);
# 150_fence_retry_live_holder.pl: a holder waiting for a lock itself is
# refused at once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $loops = 1000;
my $rounds = 20;
my $slow_loops = 30;
my $node = le_node('rejoin_after_release', conf => 'max_locks_per_transaction = 2500');
$node->safe_psql('postgres', q{
	SELECT le_group_create('g', 3);
	CREATE TABLE outcome (kind text, n int);
	-- Member a's heartbeat, or owner a's le_acquire of k: the token, NULL if refused.
	CREATE FUNCTION take(kind text, ttl interval) RETURNS bigint LANGUAGE plpgsql AS $$
	BEGIN
		IF kind = 'group' THEN
			RETURN (SELECT fencing_token FROM le_group_heartbeat('g', 'a', ttl) WHERE state = 'member');
		END IF;
		RETURN (SELECT fencing_token FROM le_acquire('k', 'a', ttl));
	END $$;
	-- Leave, or release k under token t (none if NULL), and take nlocks locks.
	CREATE FUNCTION free(kind text, t bigint, nlocks int DEFAULT 2000) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		IF kind = 'group' THEN
			PERFORM le_group_leave('g', 'a');
		ELSIF t IS NOT NULL THEN
			PERFORM le_release('k', 'a', t);
		END IF;
		PERFORM pg_advisory_xact_lock(x) FROM generate_series(1, nlocks) AS x;
	END $$;
	-- Join, then leave in a transaction that also holds nlocks locks.
	CREATE PROCEDURE leaver(kind text, n int, nlocks int DEFAULT 2000) LANGUAGE plpgsql AS $$
	DECLARE t bigint;
	BEGIN
		FOR i IN 1..n LOOP
			BEGIN
				t := take(kind, '1 hour');
			EXCEPTION WHEN lock_not_available THEN t := NULL;
			END;
			COMMIT;
			PERFORM free(kind, t, nlocks);
			PERFORM pg_sleep(0.0005);
			COMMIT;
			PERFORM pg_sleep(0.003);
		END LOOP;
	END $$;
	-- Leave in a subtransaction that outlives the 300 ms lease, then rolls back.
	CREATE PROCEDURE savepoint_leaver(kind text, n int) LANGUAGE plpgsql AS $$
	BEGIN
		FOR i IN 1..n LOOP
			BEGIN
				PERFORM free(kind, (SELECT fencing_token FROM le_lease WHERE lease_key = 'k'));
				PERFORM pg_sleep(0.4);
				RAISE EXCEPTION 'undo';
			EXCEPTION WHEN raise_exception THEN NULL;
			END;
			PERFORM pg_sleep(0.002);
			COMMIT;
			PERFORM pg_sleep(0.05);
		END LOOP;
		INSERT INTO outcome VALUES (kind || ' done', 0);
	END $$;
	-- The same member id or owner renewing n times (NULL: until the leaver
	-- is done), counting what went wrong.
	CREATE PROCEDURE renewer(kind text, ttl interval, pause float8, n int) LANGUAGE plpgsql AS $$
	DECLARE busy int := 0; refused int := 0; i int := 0;
	BEGIN
		WHILE (n IS NULL AND NOT EXISTS (SELECT 1 FROM outcome o WHERE o.kind = renewer.kind || ' done'))
			  OR i < n LOOP
			i := i + 1;
			BEGIN
				IF take(kind, ttl) IS NULL THEN
					refused := refused + 1;
				END IF;
			EXCEPTION WHEN lock_not_available THEN busy := busy + 1;
			END;
			COMMIT;
			IF pause > 0 THEN
				PERFORM pg_sleep(pause);
			END IF;
		END LOOP;
		INSERT INTO outcome VALUES (kind || ' busy', busy), (kind || ' refused', refused);
		DELETE FROM outcome o WHERE o.kind = renewer.kind || ' done';
	END $$;
});

# run(WHAT, KIND, LEAVER CALL, RENEWER TTL, RENEWER PAUSE, RENEWALS or 'NULL')
sub run
{
	my ($what, $kind, $leaver, $ttl, $pause, $n) = @_;
	$node->safe_psql('postgres', "DELETE FROM outcome; SELECT take('$kind', '$ttl')");
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-c', "CALL $leaver" ],
		'>', \$out, '2>', \$err);
	$node->safe_psql('postgres', "CALL renewer('$kind', '$ttl', $pause, $n)");
	$h->finish;
	is($h->result(0), 0, "$what, $kind: the freeing loop ran") or diag($err);
	note($node->safe_psql('postgres', "SELECT string_agg(kind || ' ' || n, ', ') FROM outcome"));
	is($node->safe_psql('postgres', "SELECT n FROM outcome WHERE kind = '$kind busy'"), '0',
		"$what, $kind: no renewal failed with 55P03 after the release it waited for");
	is($node->safe_psql('postgres', "SELECT n FROM outcome WHERE kind = '$kind refused'"), '0',
		"$what, $kind: no renewal was refused a lease nobody held") if $kind eq 'lease';
}

for my $kind ('group', 'lease')
{
	run('commit', $kind, "leaver('$kind', $loops)", '1 hour', 0, $loops);
	run('slow commit', $kind, "leaver('$kind', $slow_loops, 200000)", '1 hour', 0, $slow_loops);
	run('savepoint', $kind, "savepoint_leaver('$kind', $rounds)", '300 ms', 0.01, 'NULL');
}

# Tokens still rise and periods do not overlap.
is(le_overlapping_periods($node), '0', 'no two periods of a key overlap');

$node->stop;
done_testing();
