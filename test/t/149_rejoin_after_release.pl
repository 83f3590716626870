# G15, G1: a holder frees its lease (a member leaving its group, or a
# plain release) while the same member id or owner, in another session,
# waits for that row to renew it.  The waiter wakes when the freeing
# transaction's row lock goes, and may find its fence lock still held for
# a moment: PostgreSQL releases a transaction's locks one lock-table
# partition after the other, and a transaction holding many locks (here
# 2,000 advisory locks) takes a while to release them all.  The waiter
# must then take the lease anew, never get 55P03 ("membership is busy") or
# a refusal of a lease nobody holds.  Each loop runs 1,000 times.
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $loops = 1000;
my $node = le_node('rejoin_after_release');
$node->safe_psql('postgres', q{
	SELECT le_group_create('g', 3);
	CREATE TABLE outcome (kind text, n int);
	-- Member a's heartbeat, or owner a's le_acquire of k: the token, NULL if refused.
	CREATE FUNCTION take(kind text) RETURNS bigint LANGUAGE plpgsql AS $$
	BEGIN
		IF kind = 'group' THEN
			RETURN (SELECT fencing_token FROM le_group_heartbeat('g', 'a', '1 hour') WHERE state = 'member');
		END IF;
		RETURN (SELECT fencing_token FROM le_acquire('k', 'a', '1 hour'));
	END $$;
	-- Join, then leave in a transaction that also holds 2,000 locks.
	CREATE PROCEDURE leaver(kind text, n int) LANGUAGE plpgsql AS $$
	DECLARE t bigint;
	BEGIN
		FOR i IN 1..n LOOP
			BEGIN
				t := take(kind);
			EXCEPTION WHEN lock_not_available THEN t := NULL;
			END;
			COMMIT;
			IF kind = 'group' THEN
				PERFORM le_group_leave('g', 'a');
			ELSIF t IS NOT NULL THEN
				PERFORM le_release('k', 'a', t);
			END IF;
			PERFORM pg_advisory_xact_lock(x) FROM generate_series(1, 2000) AS x;
			PERFORM pg_sleep(0.0005);
			COMMIT;
			PERFORM pg_sleep(0.003);
		END LOOP;
	END $$;
	-- The same member id or owner renewing, counting what went wrong.
	CREATE PROCEDURE renewer(kind text, n int) LANGUAGE plpgsql AS $$
	DECLARE busy int := 0; refused int := 0;
	BEGIN
		FOR i IN 1..n LOOP
			BEGIN
				IF take(kind) IS NULL THEN
					refused := refused + 1;
				END IF;
			EXCEPTION WHEN lock_not_available THEN busy := busy + 1;
			END;
			COMMIT;
		END LOOP;
		INSERT INTO outcome VALUES (kind || ' busy', busy), (kind || ' refused', refused);
	END $$;
});

for my $kind ('group', 'lease')
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-c', "CALL leaver('$kind', $loops)" ],
		'>', \$out, '2>', \$err);
	$node->safe_psql('postgres', "CALL renewer('$kind', $loops)");
	$h->finish;
	is($h->result(0), 0, "$kind: the freeing loop ran") or diag($err);
	is($node->safe_psql('postgres', "SELECT n FROM outcome WHERE kind = '$kind busy'"), '0',
		"$kind: no renewal failed with 55P03 after the release it waited for");
	is($node->safe_psql('postgres', "SELECT n FROM outcome WHERE kind = '$kind refused'"), '0',
		"$kind: no renewal was refused a lease nobody held") if $kind eq 'lease';
}

# Tokens still rise and periods do not overlap.
is(le_overlapping_periods($node), '0', 'no two periods of a key overlap');

$node->stop;
done_testing();
