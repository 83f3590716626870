# G1 through PgBouncer in transaction-pooling mode: every call may land on
# a different server connection, and the lease API still works, because it
# keeps no session state (unlike advisory locks, which die with the server
# connection they were taken on).  Proves the mission's "also through
# PgBouncer in transaction mode" for acquire, renew, release and fenced
# writes carrying their token with SET LOCAL.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $node = le_node('main');

# PgBouncer with two server connections in transaction mode, on a Unix socket.
my $via = le_pgbouncer($node, pool_size => 2);
plan skip_all => 'pgbouncer not installed' unless defined $via;

# Run SQL through PgBouncer, one psql per call, as separate application
# clients would; returns stdout.
sub via_bouncer
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, connstr => $via);
	die "psql via pgbouncer failed: $err" if $ret != 0;
	return $out;
}

# Hold one of the two pooled server connections in an open transaction;
# returns the harness and that connection's backend pid.
sub hold_connection
{
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-d', $via ], '<', \$in, '>', \$out);
	$in .= "BEGIN; SELECT pg_backend_pid();\n";
	$h->pump until $out =~ /^(\d+)$/m;
	return ($h, $1, \$in);
}

# Let a held connection go back to the pool.
sub let_go
{
	my ($h, $in) = @_;
	$$in .= "COMMIT;\n\\q\n";
	$h->finish;
}

my ($acq_pid, $acquired, $token) = split /\|/, via_bouncer(
	"SELECT pg_backend_pid(), acquired, fencing_token FROM le_acquire('pooled', 'app-1', '30 seconds')");
is("$acquired|$token", 't|1', 'acquire through pgbouncer grants token 1');

# Park the acquiring server connection, so the renewal must use the other.
my ($h, $held, $in);
for (1 .. 20)
{
	($h, $held, $in) = hold_connection();
	last if $held == $acq_pid;
	let_go($h, $in);
	undef $h;
}
ok(defined $h, 'the acquiring server connection is parked in another client\'s transaction');
my ($renew_pid, $renewed) = split /\|/, via_bouncer(
	"SELECT pg_backend_pid(), le_renew('pooled', 'app-1', 1, '30 seconds') IS NOT NULL");
isnt($renew_pid, $acq_pid, 'the renewal ran on a different server connection');
is($renewed, 't', 'renew works on a server connection other than the acquiring one');
let_go($h, $in) if $h;

is(via_bouncer("SELECT acquired FROM le_acquire('pooled', 'app-2', '30 seconds')"),
	'f', 'another owner is refused through pgbouncer');

# A transaction pins one server connection only for its duration: renew and
# release inside explicit transactions from separate clients.
is( via_bouncer(
		"BEGIN; SELECT le_renew('pooled', 'app-1', 1, '30 seconds') IS NOT NULL; COMMIT;"),
	't',
	'renew inside a transaction through pgbouncer');
is(via_bouncer("SELECT le_release('pooled', 'app-1', 1)"),
	't', 'release through pgbouncer');
is(via_bouncer("SELECT acquired, fencing_token FROM le_acquire('pooled', 'app-2', '30 seconds')"),
	't|2', 'the next owner gets a higher token through pgbouncer');

# Concurrent campaigns through the pool: exactly one winner per race.
for my $pass (1 .. 3)
{
	via_bouncer("SELECT le_force_release('pooled')");
	my @h;
	my @out = ('') x 6;
	for my $i (0 .. 5)
	{
		push @h,
		  IPC::Run::start(
			[
				'psql', '-XAtq', '-d', $via, '-c',
				"SELECT acquired FROM le_acquire('pooled', 'racer-$i', '30 seconds')"
			],
			'>', \$out[$i]);
	}
	$_->finish for @h;
	my $winners = grep { $_ =~ /^t$/m } @out;
	is($winners, 1, "pass $pass: exactly one of six pooled racers acquired");
}

# Tokens come from one sequence: a racer that lost after drawing one leaves
# a gap, so the check is one token per period, rising in the order of the
# periods, none twice.
my $tokens = $node->safe_psql('postgres',
	"SELECT count(*) || '|' || count(DISTINCT fencing_token) || '|' || "
	  . "bool_and(fencing_token > prev)::text FROM (SELECT fencing_token, "
	  . "lag(fencing_token, 1, 0::bigint) OVER (ORDER BY acquired_at, history_id) AS prev "
	  . "FROM le_lease_history WHERE lease_key = 'pooled') h");
is($tokens, '5|5|true', 'one new token per ownership period, rising, none reused');

done_testing();
