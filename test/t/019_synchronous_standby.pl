# G3, durability under synchronous replication: when the operator
# configured a synchronous standby, a grant, a renewal and a release are
# acknowledged only once the standby has them, whatever synchronous_commit
# the caller runs with (off or local, set per session or lowered with SET
# LOCAL after the lease call in the same transaction).  Otherwise an
# acknowledged grant can vanish in a failover to that standby.
#
# With the standby stopped, each lease change must wait (wait_event SyncRep,
# or a lock held by such a waiter) and return only after the standby is back; a plain insert under
# synchronous_commit = local returns at once (the setting is in effect, only
# lease changes are raised).  Without le_durable_commit() the lease calls
# return at once too and this test fails.
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

my $primary = le_node('primary', init => { allows_streaming => 1 });
$primary->safe_psql('postgres', 'CREATE TABLE plain (i int)');

my $standby = le_standby($primary, 'standby');
$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = 'standby'");
$primary->reload;
$primary->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync'")
  or die 'the standby never became synchronous';

# Leases to renew and to release later, granted while the standby is up.
my $tb = $primary->safe_psql('postgres',
	"SET synchronous_commit = local; SELECT fencing_token FROM le_acquire('b', 'holder-b', '1 hour')");
my $tc = $primary->safe_psql('postgres',
	"SET synchronous_commit = off; SELECT fencing_token FROM le_acquire('c', 'holder-c', '1 hour')");
$primary->wait_for_catchup($standby);

$standby->stop;
note 'injected: synchronous standby stopped';

# With the standby down, a plain commit under synchronous_commit = local does
# not wait: the caller's setting is in effect.
my ($rc_plain) = $primary->psql('postgres',
	"SET synchronous_commit = local; INSERT INTO plain VALUES (1)",
	timeout => 20);
is($rc_plain, 0, 'a plain insert under synchronous_commit = local returns with the standby down');

# Each lease change in a background psql.
my %calls = (
	'acquire, synchronous_commit = local' =>
	  "SET synchronous_commit = local; SELECT fencing_token FROM le_acquire('a', 'holder-a', '1 hour')",
	'renew, synchronous_commit = off' =>
	  "SET synchronous_commit = off; SELECT le_renew('b', 'holder-b', $tb, '1 hour') IS NOT NULL",
	'release, synchronous_commit = local' =>
	  "SET synchronous_commit = local; SELECT le_release('c', 'holder-c', $tc)",
	'acquire, then SET LOCAL synchronous_commit = off before COMMIT' =>
	  "BEGIN; SELECT fencing_token FROM le_acquire('d', 'holder-d', '1 hour');"
	  . " SET LOCAL synchronous_commit = off; COMMIT;",);
my %run;
my $n = 0;
for my $name (sort keys %calls)
{
	my ($out, $err) = ('', '');
	my $app = 'le016_' . $n++;
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $primary->connstr('postgres') . " application_name=$app", '-c', $calls{$name} ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(120));
	$run{$name} = { h => $h, out => \$out, err => \$err, app => $app };
}

# The server's view of each call: still running and waiting for the standby,
# either itself (wait_event SyncRep) or behind a lock held by a transaction
# that waits for it (grants and releases NOTIFY, and committing transactions
# that notified are serialised by a lock kept until their commit is done).
sub sync_waiters
{
	return split /\n/, $primary->safe_psql('postgres',
		"SELECT a.application_name FROM pg_stat_activity a"
		  . " WHERE a.application_name LIKE 'le016_%' AND (a.wait_event = 'SyncRep'"
		  . " OR (a.wait_event_type = 'Lock' AND EXISTS (SELECT FROM pg_stat_activity b"
		  . " WHERE b.pid = ANY (pg_blocking_pids(a.pid)) AND b.wait_event = 'SyncRep')))");
}

# Give every call up to 10 s to reach the commit wait; a call that does not
# wait returns within that time instead.
my %waiting;
for (my $i = 0; $i < 100; $i++)
{
	%waiting = map { $_ => 1 } sync_waiters();
	last if keys %waiting == keys %run;
	usleep(100_000);
}
for my $name (sort keys %run)
{
	ok($waiting{ $run{$name}{app} },
		"$name: waits for the synchronous standby while it is down");
}
# Still waiting a second later: the wait lasts as long as the standby is away.
sleep 1;
my @still = sync_waiters();
is(scalar(@still), scalar(keys %run), 'a second later every lease change still waits');

$standby->start;
note 'standby started again';
for my $name (sort keys %run)
{
	my $r = $run{$name};
	$r->{h}->finish;
	is($r->{h}->result(0), 0, "$name: returns once the standby is back")
	  or diag ${ $r->{err} };
	unlike(${ $r->{err} }, qr/WARNING|ERROR/, "$name: no warning (the commit wait was not cancelled)");
}
my $ta = ${ $run{'acquire, synchronous_commit = local'}{out} };
chomp $ta;
like($ta, qr/^\d+$/, "the acquire returned its token ($ta)");

# What was acknowledged is on the standby.
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres',
		"SELECT string_agg(lease_key || '=' || coalesce(holder, '<free>'), ' ' ORDER BY lease_key) FROM le_leases"),
	'a=holder-a b=holder-b c=<free> d=holder-d',
	'the standby has every acknowledged grant, renewal and release');

# The caller's setting is back after the lease call's transaction.
is($primary->safe_psql('postgres',
		"SET synchronous_commit = local; SELECT le_renew('a', 'holder-a', $ta, '1 hour') IS NOT NULL;"
		  . " SHOW synchronous_commit"),
	"t\nlocal", 'the caller\'s synchronous_commit is restored after the transaction');

done_testing();
