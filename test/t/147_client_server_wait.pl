# G9, G11: against extension 1.1 a follower waits for the lease inside the
# server (le_acquire with wait), so its campaign connection neither LISTENs
# nor watches the lease (the release of a watched lease sends a NOTIFY, and
# the server serializes notifying commits).  After its campaign connection
# is terminated, the follower sends le_acquire on the new connection at
# once: the pause after an error comes before the new connection, not
# before the first le_acquire on it.  Against extension 1.0 (no wait in
# the server) the follower LISTENs and watches the lease.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use Time::Local qw(timegm);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeNode;
use LeClientTest;

# every statement in the server log, with its time and backend pid
my $node = le_node('client_server_wait',
	conf => "log_statement = 'all'\nlog_line_prefix = '%m [%p] %a: '\nlog_timezone = 'UTC'\n");
my $dsn = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir;
$node->safe_psql('postgres', 'CREATE DATABASE old10');
$node->safe_psql('old10', "CREATE EXTENSION leader_election VERSION '1.0'");

sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]); }

# Holder and validity of a lease of database $db.
sub holder_in { return sql("SELECT holder || '|' || CASE WHEN is_valid THEN 't' ELSE 'f' END FROM le_leases WHERE lease_key = '$_[0]'", $_[1]); }

# Seconds from the end of the last but one period of a lease to the grant of the last one.
sub last_handover
{
	my ($key, $db) = @_;
	return sql("SELECT extract(epoch FROM max(acquired_at)) - extract(epoch FROM "
		  . "(SELECT ended_at FROM le_lease_history WHERE lease_key = '$key' ORDER BY fencing_token DESC OFFSET 1 LIMIT 1)) "
		  . "FROM le_lease_history WHERE lease_key = '$key'", $db);
}

# Server log lines from byte offset $from on: [seconds, pid, application, text].
sub log_lines
{
	my ($from) = @_;
	my @l;
	for (split /\n/, slurp_file($node->logfile, $from))
	{
		next unless /^(\d+)-(\d+)-(\d+) (\d+):(\d+):(\d+\.\d+) UTC \[(\d+)\] ([^:]*): (.*)$/;
		push @l, [ timegm(0, $5, $4, $3, $2 - 1, $1) + $6, $7, $8, $9 ];
	}
	return @l;
}

# Watches (session-level AccessShareLock on the lease's fence lock) held by
# the campaign connections of database $db.
sub campaign_watches
{
	my ($db) = @_;
	return sql("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
		  . "WHERE a.application_name = 'pg_leader campaign' AND a.datname = '$db' "
		  . "AND l.locktype = 'advisory' AND l.mode = 'AccessShareLock'");
}

# The backend pid of the campaign connection waiting in le_acquire, of database $db.
sub waiting_campaign
{
	my ($db) = @_;
	return sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'pg_leader campaign' "
		  . "AND datname = '$db' AND state = 'active' AND query LIKE '%le_acquire(%'");
}

my $log_from = -s $node->logfile;
my @timing = ('--ttl', '4s', '--retry', '5s', '--grace', '1s');

# --- 1.1: no LISTEN, no le_watch --------------------------------------------------
my $a = start_candidate(dir => $dir, name => 'wA', dsn => $dsn, key => 'sw',
	opts => [@timing], command => [ 'sleep', '600' ]);
ok(wait_for(sub { lease_state($node, 'sw') =~ /^wA\|\d+\|t$/ }, 30), 'wA leads');
my $b = start_candidate(dir => $dir, name => 'wB', dsn => $dsn, key => 'sw',
	opts => [@timing], command => [ 'sleep', '600' ]);
ok(wait_for(sub { log_has($b, qr/new_leader .*holder wA/) }, 30), 'wB follows');
ok(log_has($b, qr/the server waits for the lease/), 'wB waits in the server');
my $old;
ok(wait_for(sub { ($old) = waiting_campaign('postgres'); $old }, 10), 'wB is inside le_acquire');
is(campaign_watches('postgres'), 0, 'no campaign connection watches the lease (1.1)');
my @camp_stmts = grep { $_->[2] eq 'pg_leader campaign' } log_lines($log_from);
ok((grep { $_->[3] =~ /le_acquire\(/ } @camp_stmts), 'the campaign statements are in the server log');
is_deeply([ map { $_->[3] } grep { $_->[3] =~ /LISTEN|le_watch\(/ } @camp_stmts ], [],
	'no campaign connection sends LISTEN or le_watch (1.1)');

# --- 1.1: after the connection is terminated, le_acquire on the new one at once ---
my $term_from = -s $node->logfile;
sql("SELECT pg_terminate_backend($old)");
my $new;
ok(wait_for(sub { ($new) = waiting_campaign('postgres'); $new && $new != $old }, 20),
	'wB waits in le_acquire on a new connection');
my @l = log_lines($term_from);
my ($fatal) = grep { $_->[1] == $old && $_->[3] =~ /terminating connection/ } @l;
my ($first) = grep { $_->[1] == $new && $_->[3] =~ /le_acquire\(/ } @l;
ok($fatal && $first, 'the termination and the next le_acquire are logged');
my $gap = $first->[0] - $fatal->[0];
note(sprintf('campaign connection terminated -> first le_acquire on the new one: %.0f ms (retry 5 s)',
	1000 * $gap));
cmp_ok($gap, '<', 1.0, 'the first le_acquire on the new connection follows at once, not after the retry interval');
is(campaign_watches('postgres'), 0, 'nor does the new connection watch the lease');
ok(!(grep { $_->[2] eq 'pg_leader campaign' && $_->[3] =~ /LISTEN|le_watch\(/ } log_lines($term_from)),
	'nor LISTEN');
kill 'TERM', $a->{pid};
ok(wait_for(sub { lease_state($node, 'sw') =~ /^wB\|\d+\|t$/ }, 20), 'wB takes over after wA shuts down');
my @h = history_rows($node, 'sw');
cmp_ok($h[-1][2] - $h[-2][3], '<', 2, 'at the release, not at a retry interval');
kill 'TERM', $b->{pid};
ok(wait_for(sub { defined reap($a) && defined reap($b) }, 20), 'both exit');

# --- 1.1: --loop candidates hand over at every release ---------------------------
# After its job a --loop candidate resigns and lets the others go first for a
# retry interval (5 s); when the other's shorter job ends meanwhile, the
# pausing candidate still takes over at that release (1.0: woken by its
# NOTIFY; 1.1: it reads the lease, finds it held and waits in le_acquire).
my @loop = map {
	start_candidate(dir => $dir, name => "l$_", dsn => $dsn, key => 'swloop',
		opts => [ @timing, '--loop' ], command => [ 'sleep', '1.5' ])
} 1 .. 2;
ok(wait_for(sub { @h = history_rows($node, 'swloop'); @h >= 5 }, 30), 'five periods of two --loop candidates');
kill 'TERM', map { $_->{pid} } @loop;
ok(wait_for(sub { !grep { !defined reap($_) } @loop }, 20), 'both exit');
my @gaps = map { $h[$_][2] - $h[ $_ - 1 ][3] } 1 .. 4;
note(sprintf('--loop release -> next grant: %s ms', join(', ', map { sprintf('%.1f', 1000 * $_) } @gaps)));
is_deeply([ grep { $_ >= 1 } @gaps ], [], 'every release is taken over at once, not after the pause of 5 s');
is_deeply([ map { $h[$_][0] ne $h[ $_ - 1 ][0] ? 'alternate' : 'same' } 1 .. 4 ], [ ('alternate') x 4 ],
	'by the other candidate');

# --- 1.0: LISTEN and le_watch -----------------------------------------------------
my $from10 = -s $node->logfile;
my $dsn10 = $node->connstr('old10');
my $c = start_candidate(dir => $dir, name => 'oC', dsn => $dsn10, key => 'sw10',
	opts => [@timing], command => [ 'sleep', '600' ]);
ok(wait_for(sub { holder_in('sw10', 'old10') eq 'oC|t' }, 30), 'oC leads (1.0)');
my $d = start_candidate(dir => $dir, name => 'oD', dsn => $dsn10, key => 'sw10',
	opts => [@timing], command => [ 'sleep', '600' ]);
ok(wait_for(sub { log_has($d, qr/new_leader .*holder oC/) }, 30), 'oD follows (1.0)');
ok(!log_has($d, qr/the server waits for the lease/), 'oD does not wait in the server');
ok(wait_for(sub { campaign_watches('old10') >= 1 }, 10), 'a campaign connection watches the lease (1.0)');
ok((grep { $_->[2] eq 'pg_leader campaign' && $_->[3] =~ /LISTEN leader_election/ } log_lines($from10)),
	'and LISTENs');
kill 'TERM', $c->{pid};
ok(wait_for(sub { holder_in('sw10', 'old10') eq 'oD|t' }, 20), 'oD takes over after oC shuts down');
cmp_ok(last_handover('sw10', 'old10'), '<', 2, 'at the release (NOTIFY), not at a retry interval');
kill 'TERM', $d->{pid};
ok(wait_for(sub { defined reap($c) && defined reap($d) }, 20), 'both exit (1.0)');

stop_all();
$node->stop;
done_testing();
