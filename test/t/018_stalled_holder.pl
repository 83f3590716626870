# G9 (liveness) when the holder itself stalls inside a transaction
# that changed the lease: a client that calls le_acquire or le_renew inside
# BEGIN ... and then stops (paused, dead host, forgotten COMMIT) keeps the
# lease row locked (and, for a grant, the fence lock) until its transaction
# ends.  The call lowers idle_in_transaction_session_timeout for the rest of
# that transaction to the ttl it granted, so the stalled session ends and the
# next candidate gets the lease within ttl + a small bound of the stall.
# Before, every attempt failed with 55P03 for as long as the client stayed
# stopped.  Rounds: a grant in an open transaction, a renewal in an open
# transaction, each with the client process stopped by SIGSTOP; then that a
# shorter setting of the caller's own is kept, and that autocommit calls
# leave the setting alone.  The times measured are printed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;

my $ttl_s = 1;
my $bound_s = $ttl_s + 1.5;

my $node = le_node('stalled_holder', conf => "leader_election.lock_timeout = '1s'\n");
$node->safe_psql('postgres', q{
-- le_acquire every 50 ms until granted or max_s seconds passed; 55P03 counts
-- as a refusal.
CREATE FUNCTION campaign(key text, owner text, max_s int,
                         OUT acquired boolean, OUT fencing_token bigint,
                         OUT waited numeric, OUT tries int)
LANGUAGE plpgsql AS $$
DECLARE
    started timestamptz := clock_timestamp();
BEGIN
    tries := 0;
    acquired := false;
    WHILE NOT acquired AND clock_timestamp() < started + make_interval(secs => max_s) LOOP
        tries := tries + 1;
        BEGIN
            SELECT a.acquired, a.fencing_token INTO acquired, fencing_token
              FROM le_acquire(key, owner, '1 minute') AS a;
        EXCEPTION WHEN lock_not_available THEN
            acquired := false;
        END;
        IF NOT acquired THEN
            PERFORM pg_sleep(0.05);
        END IF;
    END LOOP;
    waited := round(extract(epoch FROM clock_timestamp() - started), 3);
END $$;
});

my %setup = (
	'grant in an open transaction' =>
	  "BEGIN;\nSELECT 'token ' || fencing_token FROM le_acquire('stall-grant', 'A', '$ttl_s seconds');\n",
	'renewal in an open transaction' =>
	  "SELECT fencing_token AS tok FROM le_acquire('stall-renew', 'A', '$ttl_s seconds') \\gset\n"
	  . "BEGIN;\nSELECT 'token ' || :tok || ' renewed ' || (le_renew('stall-renew', 'A', :tok, '$ttl_s seconds') IS NOT NULL);\n",
);
my %key = ('grant in an open transaction' => 'stall-grant', 'renewal in an open transaction' => 'stall-renew');

for my $case (sort keys %setup)
{
	my ($in, $out, $err) = ('', '', '');
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $a = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err, $timer);
	$in .= $setup{$case} . "SELECT setting FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout';\n";
	$a->pump until $out =~ /^token (\d+).*\n(\S+)\n/m || $err =~ /ERROR/ || $timer->is_expired;
	my ($old, $setting) = $out =~ /^token (\d+).*\n(\S+)\n/m;
	ok(defined $old, "$case: A holds the lease inside its open transaction") or diag($err);
	is($setting, $ttl_s * 1000, "$case: the idle bound of A's transaction is its ttl");
	$old //= 0;
	kill 'STOP', $a->{KIDS}[0]{PID};

	# B campaigns every 50 ms for at most 10 s, from the moment A stalled.
	my ($acquired, $token, $waited, $tries) = split /\|/,
	  $node->safe_psql('postgres', "SELECT * FROM campaign('$key{$case}', 'B', 10)");
	is($acquired, 't', "$case: B got the lease while A stays stopped");
	ok(defined $token && $token > $old, "$case: B's token is higher than A's $old");
	ok(defined $waited && $waited < $bound_s, "$case: B got it within ttl + 1.5 s of A's stall");
	diag(sprintf("%s: new owner %.3f s after the holder stalled (ttl %d s, %d attempts)",
		$case, $waited // -1, $ttl_s, $tries // 0));

	kill 'CONT', $a->{KIDS}[0]{PID};
	$in .= "SELECT 1;\n";
	$a->finish;
	like($err, qr/idle-in-transaction timeout|terminating connection/,
		"$case: A's stalled session was ended by the server");
	is($node->safe_psql('postgres',
		"SELECT count(*) FROM le_lease_history WHERE lease_key = '$key{$case}' AND fencing_token = $token AND holder = 'B'"),
		'1', "$case: the history shows B's period");
}

# The caller's own shorter setting is kept; outside a transaction block
# nothing is set.
is($node->safe_psql('postgres', q{
SET idle_in_transaction_session_timeout = '300ms';
BEGIN;
SELECT acquired FROM le_acquire('stall-short', 'C', '10 seconds');
SHOW idle_in_transaction_session_timeout;
COMMIT;
}), "t\n300ms", 'a shorter setting of the caller is kept');
is($node->safe_psql('postgres', q{
SELECT acquired FROM le_acquire('stall-auto', 'C', '10 seconds');
SHOW idle_in_transaction_session_timeout;
}), "t\n0", 'an autocommit call leaves the setting alone');
is($node->safe_psql('postgres', q{
BEGIN;
SELECT acquired FROM le_acquire('stall-tx', 'C', '10 seconds');
COMMIT;
SHOW idle_in_transaction_session_timeout;
}), "t\n0", 'the bound ends with the transaction');

$node->stop;
done_testing();
