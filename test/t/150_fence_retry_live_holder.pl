# G1, G15: the brief retry of the fence lock (149_rejoin_after_release.pl)
# is for a lock still held by a transaction that already ended, never for
# one a live transaction holds.  Here the holder's own re-acquire (owner a)
# waits for the lease row while its lease lapses; a competitor (owner c)
# then takes the fence lock and queues for the row behind it.  When the row
# is let go, the re-acquire finds the lease lapsed and the fence lock held
# by the competitor, which waits for the row the re-acquire now holds: the
# re-acquire must refuse at once (not after 20 tries 1 ms apart), and the
# competitor gets the lease.  Each of five rounds is timed from the moment
# the row is let go; the fastest must be well under 20 ms.
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = le_node('fence_retry_live_holder');

sub bg
{
	my ($sql, $out) = @_;
	return IPC::Run::start(
		[ 'psql', '-X', '-qAt', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-c', $sql ],
		'>', $out, '2>', $out);
}

my @late;
for my $round (1 .. 5)
{
	my ($y, $z, $c) = ('', '', '');
	$node->safe_psql('postgres', q{
		SELECT le_force_release('k') FROM le_lease WHERE lease_key = 'k';
		SELECT 1 FROM le_acquire('k', 'a', '1 second')});
	# Holds the lease row past the lease's expiry, then lets it go.
	my $hy = bg(q{BEGIN; SELECT 1 FROM le_lease WHERE lease_key = 'k' FOR UPDATE;
		SELECT pg_sleep(2);
		SELECT 'go ' || extract(epoch FROM clock_timestamp()); COMMIT;}, \$y);
	usleep(300_000);
	# The holder's re-acquire: its lease still valid at the first read.
	my $hz = bg(q{SELECT 'a ' || acquired || ' ' || extract(epoch FROM clock_timestamp())
		FROM le_acquire('k', 'a', '10 seconds')}, \$z);
	usleep(1_200_000);
	# The competitor: the lease lapsed at its first read.
	my $hc = bg(q{SELECT 'c ' || acquired FROM le_acquire('k', 'c', '10 seconds')}, \$c);
	$_->finish for ($hy, $hz, $hc);
	my ($go) = $y =~ /go ([\d.]+)/;
	my ($za, $zt) = $z =~ /a (\w+) ([\d.]+)/;
	is("$za $c", "false c true\n", "round $round: the competitor got the lease")
	  or diag("y: $y z: $z c: $c");
	push @late, ($zt - $go) * 1000 if defined $go && defined $zt;
}

my ($min) = sort { $a <=> $b } @late;
diag(sprintf('refusal after the row was let go, ms: %s',
	join(' ', map { sprintf('%.1f', $_) } @late)));
ok(defined $min && $min < 12,
	'the re-acquire refuses at once when a live transaction holds the fence lock');

# Tokens still rise and periods do not overlap.
is(le_overlapping_periods($node), '0', 'no two periods of a key overlap');

$node->stop;
done_testing();
