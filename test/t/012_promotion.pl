# G3, standby promotion and hot standby: grants the old
# primary acknowledged but never replicated must not let the promoted standby
# issue the same or a lower token (tokens after a promotion jump to at least
# (timeline - 1) << 40), whether the standby is asynchronous or synchronous
# with the commit wait cancelled, and also after the database was moved by
# pg_dump to another cluster, whose timelines say nothing about the tokens'
# (rows issued by another system identifier jump to a new range of 2^40); on
# a hot standby every mutating call fails with SQLSTATE 25006 and a clear
# message, while reads of le_leases work.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;

my $primary = le_node('primary', init => { allows_streaming => 1 });

my $standby = le_standby($primary, 'standby');

# Replicated state: lease k granted (token 1) and released; lease h held
# (token 2: one token sequence for all keys).
my $t1 = $primary->safe_psql('postgres',
	"SELECT fencing_token FROM le_acquire('k', 'p-1', '1 minute')");
$primary->safe_psql('postgres', "SELECT le_release('k', 'p-1', $t1)");
$primary->safe_psql('postgres',
	"SELECT fencing_token FROM le_acquire('h', 'holder', '1 hour')");
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres',
		"SELECT string_agg(lease_key || '=' || coalesce(holder, '<free>') || '/' || fencing_token, ' '"
		  . " ORDER BY lease_key) FROM le_leases"),
	'h=holder/2 k=<free>/1', 'the standby caught up: reads of le_leases work on a hot standby');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM le_lease_history'),
	'2', 'reads of le_lease_history work on a hot standby');

# Every mutating call fails on the standby with 25006 and says why.
my %mutations = (
	le_acquire => [ "SELECT * FROM le_acquire('k', 'on-standby', '1 minute')", 'acquire' ],
	le_renew => [ "SELECT le_renew('h', 'holder', 1, '1 minute')", 'renew' ],
	le_release => [ "SELECT le_release('h', 'holder', 1)", 'release' ],
	le_force_release => [ "SELECT le_force_release('h')", 'release' ],
	le_prune_history => [ "SELECT le_prune_history()", 'prune the history of' ],);
for my $fn (sort keys %mutations)
{
	my ($sql, $verb) = @{ $mutations{$fn} };
	my ($stdout, $stderr);
	my $rc = $standby->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		stdout => \$stdout, stderr => \$stderr);
	note "on the standby: $sql -> $stderr";
	isnt($rc, 0, "$fn fails on the standby");
	like($stderr, qr/ERROR:  25006: cannot $verb a lease while the server is in recovery/,
		"$fn: SQLSTATE 25006 and a message that names the action");
	like($stderr, qr/HINT:  Connect to the primary/, "$fn: the hint sends the caller to the primary");
}
is($standby->safe_psql('postgres',
		"SELECT holder || '/' || fencing_token FROM le_leases WHERE lease_key = 'h'"),
	'holder/2', 'the failed calls changed nothing on the standby');

# Cut the standby off, then let the primary issue tokens it never sees.
$standby->stop;
note 'injected: standby stopped; the primary now grants tokens it will never replicate';
my @unseen;
for my $i (1 .. 3)
{
	my $t = $primary->safe_psql('postgres',
		"SELECT fencing_token FROM le_acquire('k', 'p-unseen-$i', '1 minute')");
	$primary->safe_psql('postgres', "SELECT le_release('k', 'p-unseen-$i', $t)");
	push @unseen, $t;
}
push @unseen, $primary->safe_psql('postgres',
	"SELECT fencing_token FROM le_acquire('k', 'p-last', '1 minute')");
push @unseen, $primary->safe_psql('postgres',
	"SELECT fencing_token FROM le_acquire('new-key', 'p-last', '1 minute')");
$primary->safe_psql('postgres', "SELECT le_force_release('h')");
push @unseen, $primary->safe_psql('postgres',
	"SELECT fencing_token FROM le_acquire('h', 'p-last', '1 minute')");

# A synchronous standby does not help once the commit wait is cancelled: the
# grant is committed locally and its token reaches the client with a WARNING.
$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = 'standby'");
$primary->reload;
my ($sync_out, $sync_err) = ('', '');
my $sync_call = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $primary->connstr('postgres'), '-c',
		"SELECT fencing_token FROM le_acquire('sync', 'p-sync', '1 minute')" ],
	'>', \$sync_out, '2>', \$sync_err);
$primary->poll_query_until('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
  or die 'the acquire never waited for the synchronous standby';
$sync_call->finish;
chomp $sync_out;
note "injected: synchronous standby down, commit wait of an acquire cancelled; client got token $sync_out and: $sync_err";
like($sync_err, qr/already committed locally/, 'the cancelled commit wait leaves the grant committed locally');
like($sync_out, qr/^\d+$/, 'and its token reached the client');
push @unseen, $sync_out;
note 'the old primary acknowledged tokens ' . join(', ', @unseen) . ' after the cut';
my $old_max = (sort { $b <=> $a } @unseen)[0];

# Crash the old primary; promote the standby.
$primary->stop('immediate');
note 'injected: old primary stopped with -m immediate; standby started and promoted';
$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby did not leave recovery';
my $tli = $standby->safe_psql('postgres',
	"SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int");
note "new primary runs on timeline $tli";

is($standby->safe_psql('postgres',
		"SELECT coalesce(holder, '<free>') || '/' || fencing_token FROM le_leases WHERE lease_key = 'k'"),
	'<free>/1', 'the promoted standby never saw the old primary\'s later grants of k');

# New grants on the new primary: above everything the old one acknowledged
# (h is still held there by the holder the standby knew: an admin frees it).
is($standby->safe_psql('postgres', "SELECT le_force_release('h')"),
	't', 'h is force-released on the new primary');
my $base = 1 << 40;
my %granted;
for my $key (qw(k new-key h sync))
{
	my $reply = $standby->safe_psql('postgres',
		"SELECT acquired || ' ' || fencing_token FROM le_acquire('$key', 'new-primary', '1 minute')");
	my ($acquired, $token) = split / /, $reply;
	note "checked: on the new primary $key was granted token $token (old primary's highest: $old_max)";
	is($acquired, 'true', "$key is granted on the new primary");
	cmp_ok($token, '>', $old_max, "$key: token $token is above every token the old primary acknowledged");
	cmp_ok($token, '>=', $base, "$key: token jumped to the new timeline's range (>= 2^40)");
	$granted{$key} = $token;
}
is($standby->safe_psql('postgres',
		"SELECT string_agg(DISTINCT token_timeline::text, ',') FROM le_lease"),
	$tli, 'the lease rows record the timeline that issued their tokens');

# Within the new timeline tokens rise again within its range.
$standby->safe_psql('postgres', "SELECT le_force_release('k')");
my $after = $standby->safe_psql('postgres',
	"SELECT fencing_token FROM le_acquire('k', 'after', '1 minute')");
ok($after > $granted{k} && $after < 2 * $base,
	"the next grant on the same timeline ($after) rises within the timeline's range");

# Part 2: the promoted server's tokens are in the timeline-2 range.  Move the
# database with pg_dump to a new cluster (timeline 1) and fail that one over
# too: its promoted standby must still exceed what its old primary issued,
# although those tokens are already above (2 - 1) << 40.
my $tmp = PostgreSQL::Test::Utils::tempdir;
$standby->command_ok([ 'pg_dump', '-Fc', '-f', "$tmp/moved.dump", '-d', $standby->connstr('postgres') ],
	'part 2: dump of the promoted server');
$standby->stop;

my $primary2 = PostgreSQL::Test::Cluster->new('primary2');
$primary2->init(allows_streaming => 1);
$primary2->start;
$primary2->safe_psql('postgres', 'CREATE DATABASE moved');
$primary2->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', $primary2->connstr('moved'), "$tmp/moved.dump" ],
	'part 2: restore into a new cluster on timeline 1');
$primary2->safe_psql('moved', "SELECT le_force_release('k')");
my $moved = $primary2->safe_psql('moved', "SELECT fencing_token FROM le_acquire('k', 'moved-1', '1 minute')");
cmp_ok($moved, '>', $base + 1, "part 2: the moved database goes on from its tokens ($moved)");
my $standby2 = le_standby($primary2, 'standby2');
$standby2->stop;

# k was granted once on the new cluster before the cut (its standby knows
# that grant); sync was not touched since the restore (its standby has the
# row exactly as restored, from the other cluster's timeline 2).
my %unseen2;
for my $i (1 .. 3)
{
	for my $key (qw(k sync))
	{
		$primary2->safe_psql('moved', "SELECT le_force_release('$key')");
		push @{ $unseen2{$key} }, $primary2->safe_psql('moved',
			"SELECT fencing_token FROM le_acquire('$key', 'moved-unseen-$i', '1 minute')");
	}
}
note 'part 2 injected: standby cut off; the old primary acknowledged tokens '
  . join('; ', map { "$_: " . join(', ', @{ $unseen2{$_} }) } sort keys %unseen2)
  . ', then crashed; standby promoted';
$primary2->stop('immediate');
$standby2->start;
$standby2->promote;
$standby2->poll_query_until('moved', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby2 did not leave recovery';
for my $key (qw(k sync))
{
	$standby2->safe_psql('moved', "SELECT le_force_release('$key')");
	my $after = $standby2->safe_psql('moved',
		"SELECT fencing_token FROM le_acquire('$key', 'moved-new', '1 minute')");
	my $old = $unseen2{$key}[-1];
	note "part 2 checked: the promoted standby granted $key token $after";
	cmp_ok($after, '>', $old,
		"part 2: $key: token $after is above every token the old primary acknowledged ($old)");
}

$standby2->stop;
done_testing();
