# G3: tokens never repeat across pg_upgrade.  The upgraded
# cluster keeps every lease, token and history row; its holders keep their
# leases; and because pg_upgrade gives the data a new system identifier (and
# starts the WAL again on timeline 1), the first grant of each key moves to a
# new range of 2^40 tokens.  The old cluster may have run on a later timeline
# than the new one's 1; without the jump, a failover of the upgraded cluster
# could then issue tokens its old primary had issued (012_promotion.pl part 2
# shows that failure for a pg_dump move).
use strict;
use warnings;

use Cwd;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $old = le_node('old');
for my $i (1 .. 4)
{
	my $t = $old->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('k', 'o-$i', '1 minute')");
	$old->safe_psql('postgres', "SELECT le_release('k', 'o-$i', $t)");
}
my $held = $old->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('held', 'holder', '1 hour')");
my %state_sql = (
	lease => "SELECT string_agg(format('%s', l), E'\\n' ORDER BY lease_id) FROM le_lease l",
	history => "SELECT string_agg(format('%s', h), E'\\n' ORDER BY history_id) FROM le_lease_history h",);
my %before;
$before{$_} = $old->safe_psql('postgres', $state_sql{$_}) for keys %state_sql;
my $old_sysid = $old->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
$old->stop;

my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
my $bindir = $new->config_data('--bindir');
my $cwd = getcwd();
chdir PostgreSQL::Test::Utils::tempdir or die "chdir: $!";
$new->command_ok(
	[
		'pg_upgrade', '--no-sync',
		'-d', $old->data_dir, '-D', $new->data_dir,
		'-b', $bindir, '-B', $bindir,
		'-s', $new->host,
		'-p', $old->port, '-P', $new->port
	],
	'pg_upgrade of a cluster that uses the extension');
chdir $cwd or die "chdir: $!";
note 'injected: pg_upgrade of the old cluster into a new one';
$new->start;

for my $what (sort keys %state_sql)
{
	is($new->safe_psql('postgres', $state_sql{$what}), $before{$what}, "$what carried over exactly");
}
my $new_sysid = $new->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
isnt($new_sysid, $old_sysid, 'the upgraded cluster has a new system identifier');

# The holder keeps its lease and token; others are refused.
is($new->safe_psql('postgres', "SELECT le_renew('held', 'holder', $held, '1 hour') IS NOT NULL"),
	't', "the holder renews with its pre-upgrade token $held");
is($new->safe_psql('postgres', "SELECT acquired FROM le_acquire('held', 'other', '1 minute')"),
	'f', 'another owner is refused');

# Next grants: above every pre-upgrade token, in a new range.
my $base = 1 << 40;
my $k = $new->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('k', 'n-1', '1 minute')");
note "checked: after the upgrade the next grant of k got token $k (before: 4)";
cmp_ok($k, '>', 4, "k: token $k is above the pre-upgrade tokens");
cmp_ok($k, '>=', $base, 'k: in a new range (>= 2^40) because another system issued its last token');
$new->safe_psql('postgres', "SELECT le_release('k', 'n-1', $k)");
my $k2 = $new->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('k', 'n-2', '1 minute')");
ok($k2 > $k && int($k2 / $base) == int($k / $base),
	"the next grant in the upgraded cluster ($k2) rises within the same range");
$new->safe_psql('postgres', "SELECT le_release('held', 'holder', $held)");
my $h = $new->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('held', 'n-1', '1 minute')");
cmp_ok($h, '>=', $base, "held: next grant $h is in a new range too");

$new->stop;
done_testing();
