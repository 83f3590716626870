# G9 (liveness) when the holder itself stalls inside a transaction
# that changed the lease: a client that calls le_acquire or le_renew inside
# BEGIN ... and then stops (paused, dead host, forgotten COMMIT) keeps the
# lease row locked (and, for a grant, the fence lock) until its transaction
# ends.  The call sets a deadline of the extension's own (the ttl it granted,
# leader_election.lock_timeout for le_watch's new row): once it has passed
# and the backend waits for its client, the session is ended, whatever the
# session did to idle_in_transaction_session_timeout, and the next candidate
# gets the lease within ttl + a small bound of the stall.  Cases: a grant
# and a renewal with the client stopped by SIGSTOP; a grant followed by SET
# LOCAL, RESET and SET SESSION of idle_in_transaction_session_timeout, by an
# error in a subtransaction (and one more in its aborted state), by a
# longer renewal in a subtransaction rolled back, and a new
# key's le_watch, each then idle; a holder busy past its deadline; a
# pipeline stopped before its Sync (test/c/le_pipeline_stall.c); then that
# settings are left alone, that the deadline ends with the transaction or
# its subtransaction, and that its cost per call does not grow with the
# number of leases.  The times measured are printed.
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

my $node = le_node('stalled_holder',
	conf => "leader_election.lock_timeout = '1s'\nmax_locks_per_transaction = 1024\n");
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

# Each case: A's session sets up its open transaction, prints "ready N"
# (N: the token it holds, 0 for none) and then stalls, stopped by SIGSTOP
# or merely idle after undoing idle_in_transaction_session_timeout, which
# must not matter: the bound is not a setting.
my @cases = (
	{
		name => 'grant in an open transaction',
		key => 'stall-grant',
		stop => 1,
		setup => "BEGIN;\nSELECT 'ready ' || fencing_token FROM le_acquire('stall-grant', 'A', '$ttl_s seconds');\n",
	},
	{
		name => 'renewal in an open transaction',
		key => 'stall-renew',
		stop => 1,
		setup => "SELECT fencing_token AS tok FROM le_acquire('stall-renew', 'A', '$ttl_s seconds') \\gset\n"
		  . "BEGIN;\nSELECT 'ready ' || :tok || ' renewed ' || (le_renew('stall-renew', 'A', :tok, '$ttl_s seconds') IS NOT NULL);\n",
	},
	{
		name => 'grant, then SET LOCAL idle_in_transaction_session_timeout = 0',
		key => 'stall-setlocal',
		setup => "BEGIN;\nSELECT 'ready ' || fencing_token FROM le_acquire('stall-setlocal', 'A', '$ttl_s seconds') \\g /dev/null\n"
		  . "SET LOCAL idle_in_transaction_session_timeout = 0;\nSELECT 'ready ' || fencing_token FROM le_leases WHERE lease_key = 'stall-setlocal';\n",
	},
	{
		name => 'grant, then RESET idle_in_transaction_session_timeout',
		key => 'stall-reset',
		setup => "BEGIN;\nSELECT 'ready ' || fencing_token FROM le_acquire('stall-reset', 'A', '$ttl_s seconds') \\g /dev/null\n"
		  . "RESET idle_in_transaction_session_timeout;\nSELECT 'ready ' || fencing_token FROM le_leases WHERE lease_key = 'stall-reset';\n",
	},
	{
		name => 'grant, then SET SESSION idle_in_transaction_session_timeout = 0',
		key => 'stall-session',
		setup => "BEGIN;\nSELECT 'ready ' || fencing_token FROM le_acquire('stall-session', 'A', '$ttl_s seconds') \\g /dev/null\n"
		  . "SET SESSION idle_in_transaction_session_timeout = 0;\nSELECT 'ready ' || fencing_token FROM le_leases WHERE lease_key = 'stall-session';\n",
	},
	{
		name => 'grant, then an error in a subtransaction',
		key => 'stall-suberror',
		ready_err => qr/division by zero/,
		setup => "BEGIN;\nSELECT 'ready ' || fencing_token FROM le_acquire('stall-suberror', 'A', '$ttl_s seconds');\n"
		  . "SAVEPOINT s;\nSELECT 1/0;\n",
	},
	{
		name => 'grant, then errors in an aborted subtransaction',
		key => 'stall-subaborted',
		ready_err => qr/current transaction is aborted/,
		setup => "BEGIN;\nSELECT 'ready ' || fencing_token FROM le_acquire('stall-subaborted', 'A', '$ttl_s seconds');\n"
		  . "SAVEPOINT s;\nSELECT 1/0;\nSELECT 1;\n",
	},
	{
		name => 'grant, then a longer renewal in a rolled-back subtransaction',
		key => 'stall-subrenew',
		setup => "BEGIN;\nSELECT fencing_token AS tok FROM le_acquire('stall-subrenew', 'A', '$ttl_s seconds') \\gset\n"
		  . "SAVEPOINT s;\nSELECT le_renew('stall-subrenew', 'A', :tok, '1 hour') IS NOT NULL \\g /dev/null\n"
		  . "ROLLBACK TO SAVEPOINT s;\nSELECT 'ready ' || :tok;\n",
	},
	{
		name => 'le_watch of a new key, then SET LOCAL idle_in_transaction_session_timeout = 0',
		key => 'stall-watch',
		setup => "BEGIN;\nSELECT le_watch('stall-watch') \\g /dev/null\n"
		  . "SET LOCAL idle_in_transaction_session_timeout = 0;\nSELECT 'ready 0';\n",
	},
);

for my $r (@cases)
{
	my $case = $r->{name};
	my ($in, $out, $err) = ('', '', '');
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $a = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err, $timer);
	$in .= $r->{setup};
	if ($r->{ready_err})
	{
		$a->pump until ($out =~ /^ready (\d+)/m && $err =~ $r->{ready_err}) || $timer->is_expired;
	}
	else
	{
		$a->pump until $out =~ /^ready (\d+)/m || $err =~ /ERROR/ || $timer->is_expired;
	}
	my ($old) = $out =~ /^ready (\d+)/m;
	ok(defined $old, "$case: A holds the lease's locks inside its open transaction") or diag($err);
	$old //= 0;
	kill 'STOP', $a->{KIDS}[0]{PID} if $r->{stop};

	# B campaigns every 50 ms for at most 10 s, from the moment A stalled.
	my ($acquired, $token, $waited, $tries) = split /\|/,
	  $node->safe_psql('postgres', "SELECT * FROM campaign('$r->{key}', 'B', 10)");
	is($acquired, 't', "$case: B got the lease while A stays stalled");
	ok(defined $token && $token > $old, "$case: B's token is higher than A's $old");
	ok(defined $waited && $waited < $bound_s, "$case: B got it within ttl + 1.5 s of A's stall");
	diag(sprintf("%s: new owner %.3f s after the holder stalled (ttl %d s, %d attempts)",
		$case, $waited // -1, $ttl_s, $tries // 0));

	$token = 0 unless defined $token && $token ne '';
	kill 'CONT', $a->{KIDS}[0]{PID} if $r->{stop};
	$in .= "SELECT 1;\n";
	$a->finish;
	like($err, qr/FATAL:  terminating connection because its transaction kept lease "$r->{key}" locked past/,
		"$case: A's stalled session was ended by the server, naming the lease");
	is($node->safe_psql('postgres',
		"SELECT count(*) FROM le_lease_history WHERE lease_key = '$r->{key}' AND fencing_token = $token AND holder = 'B'"),
		'1', "$case: the history shows B's period");
}

# A holder busy running a statement past its deadline is not ended during
# it; once it waits for its client, it is.
{
	my ($in, $out, $err) = ('', '', '');
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $a = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err, $timer);
	$in .= "BEGIN;\nSELECT acquired FROM le_acquire('stall-busy', 'A', '$ttl_s seconds') \\g /dev/null\n"
	  . "SELECT 'slept ' || pg_sleep(2);\n";
	$a->pump until $out =~ /^slept/m || $err =~ /FATAL|ERROR/ || $timer->is_expired;
	like($out, qr/^slept/m, 'a statement running past the deadline is not interrupted');
	# psql learns of the end only when it sends the next statement.
	select(undef, undef, undef, 0.5);
	$in .= "SELECT 'after';\n";
	$a->finish;
	like($err, qr/kept lease "stall-busy" locked past/, '... and the session ends once it waits for its client');
	unlike($out, qr/^after/m, '... before it runs anything else');
}

# A pipeline that stops before its Sync keeps its implicit transaction, and
# so the lease's locks, open while the backend waits for the client: no
# BEGIN, yet the same deadline.
{
	my $exe = PostgreSQL::Test::Utils::tempdir . '/le_pipeline_stall';
	my $inc = `pg_config --includedir`;
	my $libdir = `pg_config --libdir`;
	chomp($inc, $libdir);
	my ($o, $e) = ('', '');
	ok(IPC::Run::run([ 'cc', '-Wall', '-Wextra', '-Werror', "-I$inc",
			"$FindBin::RealBin/../c/le_pipeline_stall.c", "-L$libdir", '-lpq', '-o', $exe ],
			'>', \$o, '2>', \$e), 'le_pipeline_stall.c builds') or diag($e);
	my ($out, $err) = ('', '');
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $a = IPC::Run::start(
		[ $exe, $node->connstr('postgres'),
		  "SELECT fencing_token FROM le_acquire('stall-pipeline', 'A', '$ttl_s seconds')", '6' ],
		'>', \$out, '2>', \$err, $timer);
	$a->pump until $out =~ /^ready/m || $timer->is_expired;
	my ($old) = $out =~ /^ready (\d+)/m;
	ok(defined $old, 'pipeline: A holds the lease\'s locks before its Sync') or diag($out . $err);
	$old //= 0;
	my ($acquired, $token, $waited, $tries) = split /\|/,
	  $node->safe_psql('postgres', "SELECT * FROM campaign('stall-pipeline', 'B', 10)");
	is($acquired, 't', 'pipeline: B got the lease while A waits to send its Sync');
	ok(defined $token && $token > $old, "pipeline: B's token is higher than A's $old");
	ok(defined $waited && $waited < $bound_s, 'pipeline: B got it within ttl + 1.5 s of A\'s stall');
	diag(sprintf("pipeline: new owner %.3f s after the holder stalled (ttl %d s, %d attempts)",
		$waited // -1, $ttl_s, $tries // 0));
	$a->finish;
	# libpq reports the lost connection; the FATAL naming the lease is in
	# the server's log.
	like($out, qr/^ended: /m, 'pipeline: A\'s session was ended by the server');
	like(PostgreSQL::Test::Utils::slurp_file($node->logfile),
		qr/FATAL:  terminating connection because its transaction kept lease "stall-pipeline" locked past/,
		'... naming the lease');
}

# The caller's settings are left alone; an autocommit call's deadline
# ends with its statement.
is($node->safe_psql('postgres', q{
SET idle_in_transaction_session_timeout = '300ms';
BEGIN;
SELECT acquired FROM le_acquire('stall-short', 'C', '10 seconds');
SHOW idle_in_transaction_session_timeout;
COMMIT;
}), "t\n300ms", 'the caller\'s setting is left as it is');
is($node->safe_psql('postgres', q{
SELECT acquired FROM le_acquire('stall-auto', 'C', '1 second');
SELECT pg_sleep(1.5);
SELECT 'alive';
}), "t\n\nalive", 'an autocommit call\'s deadline ends with its statement');
is($node->safe_psql('postgres', q{
BEGIN;
SELECT acquired FROM le_acquire('stall-tx', 'C', '1 second');
COMMIT;
SELECT pg_sleep(1.5);
BEGIN;
SELECT pg_sleep(0.2);
SELECT 'alive';
COMMIT;
}), "t\n\n\nalive", 'the deadline ends with the transaction');
is($node->safe_psql('postgres', q{
BEGIN;
SAVEPOINT s;
SELECT acquired FROM le_acquire('stall-sub', 'C', '1 second');
ROLLBACK TO SAVEPOINT s;
SELECT pg_sleep(1.5);
SELECT 'alive';
COMMIT;
}), "t\n\nalive", 'a deadline set in a rolled-back subtransaction goes with it');

# The deadline bookkeeping of a transaction that calls on many leases costs
# about the same per call whatever their number (it was quadratic: 4 times
# the leases took 11 times as long).
{
	my $per_call = sub {
		my ($n) = @_;
		return $node->safe_psql('postgres', qq{
BEGIN;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \\gset
SELECT count(*) FROM generate_series(1, $n) i, le_acquire('many-$n-' || i, 'A', '1 minute') \\g /dev/null
SELECT (extract(epoch FROM clock_timestamp()) - :t0) / $n;
ROLLBACK;
});
	};
	$per_call->(1000);    # warm the caches
	my $small = $per_call->(1024);
	my $large = $per_call->(32768);
	diag(sprintf("per call: %.1f us with 1024 leases, %.1f us with 32768", $small * 1e6, $large * 1e6));
	ok($large < 2 * $small, 'a call costs about the same with 32 times as many leases in the transaction');
}

$node->stop;
done_testing();
