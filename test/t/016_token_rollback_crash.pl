# G3: a token returned by a grant whose
# transaction never committed (rolled back, or still open when the server
# died) is never issued again, also across a crash with
# synchronous_commit = off.
#
# Tokens come from the sequence le_token_seq, which nextval() WAL-logs only
# every few values; the WAL of a transaction that rolls back or never
# commits is not flushed, and the WAL writer is slowed down here
# (wal_writer_delay = 10s, no checkpoints), so without the flush that
# le_acquire does after a nextval() that wrote WAL, the sequence would come
# back after the crash below the token returned before it, and this test
# fails.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $node = le_node('tokcrash', conf => q{
wal_writer_delay = 10s
wal_writer_flush_after = 1GB
checkpoint_timeout = 1h
max_wal_size = 1GB
bgwriter_lru_maxpages = 0
autovacuum = off
synchronous_commit = off
});

my @returned;

# Pass 1: a grant in a transaction that rolls back, then an immediate
# stop.  Pass 2: a grant in a transaction still open when the server is
# stopped.  Each pass starts right after a checkpoint, so the grant's
# nextval() is the one that WAL-logs the sequence.
for my $pass (1, 2)
{
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $token;
	if ($pass == 1)
	{
		$token = $node->safe_psql('postgres',
			"BEGIN; SELECT fencing_token FROM le_acquire('rb', 'ghost-$pass', '1 minute'); ROLLBACK;");
		note "pass $pass: token $token returned by a grant that rolled back";
	}
	else
	{
		my $bg = $node->background_psql('postgres');
		$bg->query_safe('BEGIN');
		$token = $bg->query_safe(
			"SELECT fencing_token FROM le_acquire('rb', 'ghost-$pass', '1 minute')");
		note "pass $pass: token $token returned in a transaction left open";
		$node->stop('immediate');
		eval { $bg->quit };
		$node->start;
	}
	like($token, qr/^\d+$/, "pass $pass: the grant returned token $token");
	push @returned, $token;

	$node->stop('immediate') if $pass == 1;
	$node->start if $pass == 1;

	is($node->safe_psql('postgres', "SELECT count(*) FROM le_leases WHERE holder LIKE 'ghost-%'"),
		'0', "pass $pass: the uncommitted grant is gone after the crash");
	my $next = $node->safe_psql('postgres',
		"SELECT fencing_token FROM le_acquire('rb', 'real-$pass', '1 minute')");
	cmp_ok($next, '>', $token,
		"pass $pass: the next grant after the crash gets token $next, above the returned $token");
	push @returned, $next;
	$node->safe_psql('postgres', "SELECT le_release('rb', 'real-$pass', $next)");
}

# Other keys never see those tokens either (one sequence for all keys).
my $other = $node->safe_psql('postgres',
	"SELECT fencing_token FROM le_acquire('other', 'x', '1 minute')");
cmp_ok($other, '>', $returned[-1], "a grant of another key gets $other, above them all");

my %seen;
is(scalar(grep { $seen{$_}++ } @returned), 0,
	'no token was returned twice: ' . join(',', @returned));

$node->stop;
done_testing();
