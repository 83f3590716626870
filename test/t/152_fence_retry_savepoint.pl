# G15, G1: a savepoint frees a lease (a member leaving its group, or a
# plain release) while the same member id or owner, in another session,
# waits for that row to renew it; the savepoint holds the row past the
# lease's expiry and rolls back (an exception block), in a transaction that
# goes on.  The waiter wakes when the subtransaction's row lock goes, finds
# the lease lapsed, and may find its fence lock still held for a moment:
# the subtransaction gives back its 2,000 locks one lock-table partition
# after the other while its transaction still runs.  The waiter must take
# the lease anew, never get 55P03 ("membership is busy") or a refusal of a
# lease nobody holds (150_fence_retry_live_holder.pl: a holder waiting for
# a lock itself is refused at once).  20 rounds of each.
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $rounds = $ENV{ROUNDS} // 20;
my $node = le_node('fence_retry_savepoint');
$node->safe_psql('postgres', q{
	SELECT le_group_create('g', 3);
	CREATE TABLE outcome (kind text, n int);
	CREATE FUNCTION take(kind text) RETURNS bigint LANGUAGE plpgsql AS $$
	BEGIN
		IF kind = 'group' THEN
			RETURN (SELECT fencing_token FROM le_group_heartbeat('g', 'a', '300 ms') WHERE state = 'member');
		END IF;
		RETURN (SELECT fencing_token FROM le_acquire('k', 'a', '300 ms'));
	END $$;
	CREATE PROCEDURE leaver(kind text, n int) LANGUAGE plpgsql AS $$
	BEGIN
		FOR i IN 1..n LOOP
			BEGIN
				IF kind = 'group' THEN
					PERFORM le_group_leave('g', 'a');
				ELSE
					PERFORM le_release('k', 'a', (SELECT fencing_token FROM le_lease WHERE lease_key = 'k'));
				END IF;
				PERFORM pg_advisory_xact_lock(x) FROM generate_series(1, 2000) AS x;
				PERFORM pg_sleep(0.4);
				RAISE EXCEPTION 'undo';
			EXCEPTION WHEN raise_exception THEN NULL;
			END;
			PERFORM pg_sleep(0.002);
			COMMIT;
			PERFORM pg_sleep(0.05);
		END LOOP;
	END $$;
	CREATE PROCEDURE renewer(kind text, secs float8) LANGUAGE plpgsql AS $$
	DECLARE busy int := 0; refused int := 0; t0 timestamptz := clock_timestamp();
	BEGIN
		WHILE clock_timestamp() < t0 + secs * interval '1 second' LOOP
			BEGIN
				IF take(kind) IS NULL THEN
					refused := refused + 1;
				END IF;
			EXCEPTION WHEN lock_not_available THEN busy := busy + 1;
			END;
			COMMIT;
			PERFORM pg_sleep(0.01);
		END LOOP;
		INSERT INTO outcome VALUES (kind || ' busy', busy), (kind || ' refused', refused);
	END $$;
});

for my $kind ('group', 'lease')
{
	$node->safe_psql('postgres', "SELECT take('$kind')");
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-c', "CALL leaver('$kind', $rounds)" ],
		'>', \$out, '2>', \$err);
	$node->safe_psql('postgres', "CALL renewer('$kind', " . ($rounds * 0.46) . ")");
	$h->finish;
	is($h->result(0), 0, "$kind: the leaver ran") or diag($err);
	note($node->safe_psql('postgres',
		"SELECT string_agg(kind || ' ' || n, ', ') FROM outcome WHERE kind LIKE '$kind %'"));
	is($node->safe_psql('postgres', "SELECT n FROM outcome WHERE kind = '$kind busy'"), '0',
		"$kind: no renewal failed with 55P03 after the rollback it waited for");
	is($node->safe_psql('postgres', "SELECT n FROM outcome WHERE kind = '$kind refused'"), '0',
		"$kind: no renewal was refused a lease nobody held") if $kind eq 'lease';
}

$node->stop;
done_testing();
