# G1, G3, G5, G9: randomized schedule: five sessions driven from one program by a
# seeded random number generator take random lease, fence, job, pause,
# VACUUM FULL, pg_terminate_backend and several-calls-per-statement steps
# (test/random/le_random.py); its checker then proves from the database
# alone (history, commit timestamps, protected rows, every token a client
# was given) and the server log: no write committed after a newer token's
# grant or after its own period ended, no token issued to two periods,
# tokens rising and periods not overlapping, no crash or internal error.
#
# LE_RANDOM_SECONDS (default 50) sets the duration, LE_RANDOM_SEED the seed
# (printed either way, so a failing schedule can be replayed).
use strict;
use warnings;
use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib $FindBin::Bin;
use LeNode;

my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
my $driver = "$FindBin::Bin/../random/le_random.py";

my $node = le_node('random', conf => qq{
track_commit_timestamp = on
max_connections = 30
leader_election.lock_timeout = '1s'
});

my $seconds = $ENV{LE_RANDOM_SECONDS} // 50;
my @cmd = ($python, $driver, '--dsn', $node->connstr('postgres'),
	'--seconds', $seconds, '--server-log', $node->logfile);
push @cmd, '--seed', $ENV{LE_RANDOM_SEED} if $ENV{LE_RANDOM_SEED};

my ($out, $err) = ('', '');
my $ok = IPC::Run::run(\@cmd, '>', \$out, '2>', \$err);
note $out;
diag $err if $err ne '';
my ($seed) = $out =~ /^le_random: seed (\d+)/m;
ok(defined $seed, 'the driver ran and printed its seed');

# One assertion per check the checker printed, so a failure names it.
my $checks = 0;
while ($out =~ /^check (.+?)\s+(ok|FAIL)\s+violations: (\d+)/mg)
{
	my ($name, $verdict, $n) = ($1, $2, $3);
	$checks++;
	is($n, 0, "$name (seed $seed)");
}
cmp_ok($checks, '>=', 12, 'the checker ran all its checks');
ok($ok, "the driver exited 0 (seed " . ($seed // '?') . ')');

# The schedule did what it is for: many periods, writes and refusals.
my ($periods, $writes, $observed) = split /\|/, $node->safe_psql('postgres', q{
SELECT (SELECT count(*) FROM le_lease_history WHERE lease_key LIKE 'rt\_%'),
       (SELECT count(*) FROM rt_audit) + (SELECT count(*) FROM rt_checked),
       (SELECT count(*) FROM rt_obs)});
note "ownership periods: $periods, committed protected writes: $writes, tokens observed: $observed";
cmp_ok($periods, '>', 50, 'many ownership periods were granted');
cmp_ok($writes, '>', 20, 'many protected writes committed');

$node->stop;
done_testing();
