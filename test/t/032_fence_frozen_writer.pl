# Issue 7 item 4 (liveness): a leader frozen inside an open fenced
# transaction must not block failover.  W writes a fenced row with its
# current token and then stays idle in its transaction (first round) or has
# its client process stopped with SIGSTOP (second round); its lease (ttl 1 s)
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
use IPC::Run;
use Time::HiRes qw(usleep);

my $ttl_s = 1;
my $bound_s = $ttl_s + 1;

my $node = PostgreSQL::Test::Cluster->new('frozen_writer');
$node->init;
$node->append_conf('postgresql.conf', qq{
leader_election.lock_timeout = '2s'
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION leader_election;
CREATE TABLE ledger (id bigserial PRIMARY KEY, round text NOT NULL, fencing_token bigint NOT NULL);
SELECT le_protect('ledger', 'frozen');
});

for my $round ('idle in transaction', 'client stopped with SIGSTOP')
{
	my $old = $node->safe_psql('postgres',
		"SELECT fencing_token FROM le_acquire('frozen', 'W', '$ttl_s seconds') WHERE acquired");
	ok($old > 0, "$round: W holds the lease with token $old");

	# W: an interactive psql that writes one fenced row and stays in its transaction.
	my ($in, $out, $err) = ('', '', '');
	my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	my $w = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err, $timer);
	$in .= "BEGIN;\nINSERT INTO ledger (round, fencing_token) VALUES ('$round', $old);\nSELECT 'written';\n";
	$w->pump until $out =~ /written/ || $timer->is_expired;
	like($out, qr/written/, "$round: W wrote a fenced row and keeps its transaction open");
	my $psql_pid = $w->{KIDS}[0]{PID};
	kill 'STOP', $psql_pid if $round =~ /SIGSTOP/;

	# B campaigns until it gets the lease, for at most 10 s.
	my ($acquired, $token, $since_grant, $since_expiry, $tries) = ('f', 0, 0, 0, 0);
	my $deadline = time + 10;
	while (time < $deadline)
	{
		$tries++;
		my ($stdout, $stderr);
		$node->psql('postgres', qq{
SELECT a.acquired, a.fencing_token,
       round(extract(epoch FROM clock_timestamp() - h.acquired_at), 3),
       round(extract(epoch FROM clock_timestamp() - h.expires_at), 3)
  FROM le_acquire('frozen', 'B', '1 minute') AS a,
       (SELECT acquired_at, acquired_at + interval '$ttl_s seconds' AS expires_at
          FROM le_lease_history WHERE lease_key = 'frozen' AND fencing_token = $old) AS h},
			stdout => \$stdout, stderr => \$stderr);
		($acquired, $token, $since_grant, $since_expiry) = split /\|/, ($stdout // '');
		last if defined $acquired && $acquired eq 't';
		usleep(50_000);
	}
	is($acquired, 't', "$round: B got the lease while W's transaction stays open");
	ok($token > $old, "$round: B's token $token is higher than W's $old");
	ok(defined $since_grant && $since_grant < $bound_s,
		"$round: B got the lease within ttl + 1 s of W's grant");
	diag(sprintf("%s: new owner after %.3f s from the old grant, %.3f s after the old lease expired (%d attempts)",
		$round, $since_grant // -1, $since_expiry // -1, $tries));

	# W resumes and tries to commit: refused, nothing of it commits.
	kill 'CONT', $psql_pid if $round =~ /SIGSTOP/;
	$in .= "COMMIT;\nSELECT 'done';\n";
	$w->pump until $out =~ /done/ || $timer->is_expired;
	like($err, qr/LE001/, "$round: W's COMMIT fails with LE001");
	$in .= "\\q\n";
	$w->finish;
	is($node->safe_psql('postgres', "SELECT count(*) FROM ledger WHERE round = '$round'"),
		'0', "$round: none of W's rows committed");
	$node->safe_psql('postgres', "SELECT le_force_release('frozen')");
}

$node->stop;
done_testing();
