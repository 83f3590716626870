# G9 (liveness) and G5: a leader frozen inside an open fenced
# transaction must not block failover.  W writes a fenced row with its
# current token and then stays idle in its transaction (first case) or has
# its client process stopped with SIGSTOP (second case); its lease (ttl 1 s)
# runs out.  A candidate that retries le_acquire every 50 ms must get the
# lease, with a higher token, within ttl + 1 s of the old grant (before the
# fix every attempt failed with 55P03 while W's transaction stayed open).
# W's transaction, resumed, cannot commit (LE001) and none of its rows ever
# commit.  The times measured are printed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;
use Time::HiRes qw(usleep);

my $ttl_s = 1;
my $bound_s = $ttl_s + 1;

my $node = le_node('frozen_writer', conf => qq{
leader_election.lock_timeout = '2s'
});
$node->safe_psql('postgres', q{
CREATE TABLE ledger (id bigserial PRIMARY KEY, phase text NOT NULL, fencing_token bigint NOT NULL);
SELECT le_protect('ledger', 'frozen');
-- le_acquire every 50 ms until granted or max_s seconds passed; 55P03 counts
-- as a refusal.
CREATE FUNCTION campaign(key text, owner text, max_s int,
                         OUT acquired boolean, OUT fencing_token bigint,
                         OUT granted_at timestamptz, OUT tries int)
LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => max_s);
BEGIN
    tries := 0;
    acquired := false;
    WHILE NOT acquired AND clock_timestamp() < deadline LOOP
        tries := tries + 1;
        BEGIN
            SELECT a.acquired, a.fencing_token INTO acquired, fencing_token
              FROM le_acquire(key, owner, '1 minute') AS a;
        EXCEPTION WHEN lock_not_available THEN
            acquired := false;
        END;
        granted_at := clock_timestamp();
        IF NOT acquired THEN
            PERFORM pg_sleep(0.05);
        END IF;
    END LOOP;
END $$;
});

for my $case ('idle in transaction', 'client stopped with SIGSTOP')
{
	# W: an interactive psql that acquires the lease (ttl 1 s), writes one
	# fenced row with its token and stays in its transaction.
	my ($in, $out, $err) = ('', '', '');
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $w = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err, $timer);
	$in .= "SELECT fencing_token AS tok FROM le_acquire('frozen', 'W', '$ttl_s seconds') WHERE acquired \\gset\n"
	  . "BEGIN;\nINSERT INTO ledger (phase, fencing_token) VALUES ('$case', :tok);\n"
	  . "SELECT 'written with token ' || :tok;\n";
	$w->pump until $out =~ /written with token \d+/ || $err =~ /ERROR/ || $timer->is_expired;
	my ($old) = $out =~ /written with token (\d+)/;
	ok(defined $old && $old > 0,
		"$case: W acquired the lease, wrote a fenced row and keeps its transaction open")
	  or diag($err);
	$old //= 0;
	my $psql_pid = $w->{KIDS}[0]{PID};
	kill 'STOP', $psql_pid if $case =~ /SIGSTOP/;

	# B campaigns every 50 ms until it gets the lease, for at most 10 s; the
	# loop runs in the server so that client start-up does not count.
	my ($acquired, $token, $since_grant, $since_expiry, $tries) = split /\|/,
	  $node->safe_psql('postgres', qq{
SELECT acquired, fencing_token,
       round(extract(epoch FROM granted_at - h.acquired_at), 3),
       round(extract(epoch FROM granted_at - h.acquired_at - interval '$ttl_s seconds'), 3),
       tries
  FROM campaign('frozen', 'B', 10) AS c,
       (SELECT acquired_at FROM le_lease_history
         WHERE lease_key = 'frozen' AND fencing_token = $old) AS h});
	is($acquired, 't', "$case: B got the lease while W's transaction stays open");
	ok($token > $old, "$case: B's token $token is higher than W's $old");
	ok(defined $since_grant && $since_grant < $bound_s,
		"$case: B got the lease within ttl + 1 s of W's grant");
	diag(sprintf("%s: new owner after %.3f s from the old grant, %.3f s after the old lease expired (%d attempts)",
		$case, $since_grant // -1, $since_expiry // -1, $tries));

	# W resumes and tries to commit: refused, nothing of it commits.
	kill 'CONT', $psql_pid if $case =~ /SIGSTOP/;
	$in .= "COMMIT;\nSELECT 'done';\n";
	$w->pump until $out =~ /done/ || $timer->is_expired;
	like($err, qr/LE001/, "$case: W's COMMIT fails with LE001");
	$in .= "\\q\n";
	$w->finish;
	is($node->safe_psql('postgres', "SELECT count(*) FROM ledger WHERE phase = '$case'"),
		'0', "$case: none of W's rows committed");
	$node->safe_psql('postgres', "SELECT le_force_release('frozen')");
}

$node->stop;
done_testing();
