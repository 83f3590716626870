# G13 and G9: the server-side wait of le_acquire(..., wait) outside what
# an isolation spec can show.  pg_terminate_backend of a sleeping waiter
# ends it with nothing held and the lease untouched; a waiter whose client
# was killed ends and is never granted the lease; a wait inside a
# transaction block that holds another lease is refused; notifications
# carry the metadata as their last member; a hot standby reads the
# metadata; and the wait works through PgBouncer in
# transaction-pooling mode (no session state: the wait and its wake are
# inside one statement).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $node = le_node('wait', conf => "leader_election.notify = all\n", init => { allows_streaming => 1 });

# A psql of its own, fed statements while it runs.
sub session
{
	my ($connstr) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-d', $connstr // $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err);
	return { h => $h, in => \$in, out => \$out, err => \$err };
}

# Send sql to a session, then pump until its output (or error) matches re.
sub send_until
{
	my ($s, $sql, $re, $what) = @_;
	${ $s->{in} } .= $sql;
	my $t = IPC::Run::timer(60);
	$t->start;
	$s->{h}->pump until ${ $s->{out} } =~ $re || ${ $s->{err} } =~ $re || $t->is_expired;
	ok(!$t->is_expired, $what);
}

# Until a backend sleeps in a lease wait (feeding session s meanwhile).
sub sleeping_pid
{
	my ($s) = @_;
	my $pid;
	for (1 .. 600)
	{
		$s->{h}->pump_nb;
		$pid = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND wait_event = 'Extension' LIMIT 1");
		last if $pid ne '';
		select(undef, undef, undef, 0.05);
	}
	return $pid;
}

$node->safe_psql('postgres', "SELECT acquired FROM le_acquire('k', 'holder', '1 hour')");
my $token = $node->safe_psql('postgres', "SELECT fencing_token FROM le_leases WHERE lease_key = 'k'");

# pg_terminate_backend of a sleeping waiter.
my $w = session();
${ $w->{in} } .= "SELECT acquired FROM le_acquire('k', 'victim', '1 hour', wait => '60 seconds');\n";
my $pid = sleeping_pid($w);
isnt($pid, '', 'the waiter sleeps in the server');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$w->{h}->finish;
like(${ $w->{err} }, qr/terminating connection/, 'the terminated waiter ends with its error');
is($node->safe_psql('postgres',
		"SELECT holder || ' ' || fencing_token FROM le_leases WHERE lease_key = 'k'"),
	"holder $token", 'the lease is untouched');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_locks WHERE pid = $pid"), '0', 'and nothing of it is held');

# A waiter whose client is killed ends (a lost client) and is never
# granted: after the holder's expiry the lease is not the orphan's.
$node->safe_psql('postgres', "SELECT acquired FROM le_acquire('o', 'holder', '2 seconds')");
$w = session();
${ $w->{in} } .= "SELECT acquired FROM le_acquire('o', 'orphan', '1 hour', wait => '60 seconds');\n";
$pid = sleeping_pid($w);
isnt($pid, '', 'a waiter sleeps in the server');
$w->{h}->signal('KILL');
$w->{h}->finish;
my $gone = '';
for (1 .. 600)
{
	$gone = $node->safe_psql('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid");
	last if $gone eq 't';
	select(undef, undef, undef, 0.05);
}
is($gone, 't', 'the backend of the killed client ends');
$node->poll_query_until('postgres',
	"SELECT expires_at < now() FROM le_leases WHERE lease_key = 'o'") or die 'the holder did not expire';
is($node->safe_psql('postgres',
		"SELECT count(*) FROM le_leases WHERE lease_key = 'o' AND holder = 'orphan'"),
	'0', 'the lease was not granted to the waiter of the killed client');

# Likewise a waiter queued behind the head (in the lock manager's wait).
$node->safe_psql('postgres', "SELECT acquired FROM le_acquire('q', 'holder', '1 hour')");
my $head = session();
${ $head->{in} } .= "SELECT acquired FROM le_acquire('q', 'head', '1 hour', wait => '60 seconds');\n";
my $head_pid = sleeping_pid($head);
$w = session();
${ $w->{in} } .= "SELECT acquired FROM le_acquire('q', 'queued', '1 hour', wait => '60 seconds');\n";
$pid = '';
for (1 .. 600)
{
	$w->{h}->pump_nb;
	$pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%queued%' AND pid <> pg_backend_pid()");
	last if $pid ne '';
	select(undef, undef, undef, 0.05);
}
isnt($pid, '', 'a second waiter queues behind the head');
$w->{h}->signal('KILL');
$w->{h}->finish;
$gone = '';
for (1 .. 600)
{
	$gone = $node->safe_psql('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid");
	last if $gone eq 't';
	select(undef, undef, undef, 0.05);
}
is($gone, 't', 'the queued backend of the killed client ends within its wait');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($head_pid)");
$head->{h}->finish;

# A wait in a transaction block that holds another lease is refused
# (0A000: it would keep that lease locked past its expiry), and the
# session lives on.
$w = session();
send_until($w, "BEGIN; SELECT acquired FROM le_acquire('other', 'w', '1 second');\n", qr/^t$/m,
	'the session holds another lease in its transaction');
${ $w->{out} } = '';
send_until($w, "SELECT acquired FROM le_acquire('k', 'w', '1 hour', wait => '3 seconds'); ROLLBACK; SELECT 'alive';\n",
	qr/alive/, 'a wait inside a transaction block holding a lease returns');
like(${ $w->{err} }, qr/cannot wait in a transaction that changed or locked a lease/, 'refused');
${ $w->{in} } .= "\\q\n";
$w->{h}->finish;

# Notifications carry the metadata last.
my $l = session();
send_until($l, "LISTEN leader_election; SELECT le_watch('n');\n", qr/^t$/m, 'a watcher listens');
$node->safe_psql('postgres',
	q{SELECT acquired FROM le_acquire('n', 'a', '1 hour', metadata => '{"addr": "10.0.0.5:8080"}')});
$node->safe_psql('postgres',
	q{SELECT le_set_metadata('n', 'a', fencing_token, '{"addr": "10.0.0.5:8081"}') FROM le_leases WHERE lease_key = 'n'});
$node->safe_psql('postgres', q{SELECT le_release('n', 'a', fencing_token) FROM le_leases WHERE lease_key = 'n'});
send_until($l, "SELECT 1;\n", qr/"event":"released".*"metadata":null\}/s, 'the notifications arrive');
like(${ $l->{out} }, qr/"event":"acquired","lease_key":"n","holder":"a","fencing_token":\d+,"expires_at":"[^"]+","metadata":\{"addr": "10.0.0.5:8080"\}\}/,
	'the grant carries its metadata, after the 1.0 members');
like(${ $l->{out} }, qr/"event":"metadata".*"metadata":\{"addr": "10.0.0.5:8081"\}\}/, 'le_set_metadata sends the new one');
${ $l->{in} } .= "\\q\n";
$l->{h}->finish;

# A hot standby reads the metadata (a column of the lease row) and refuses
# to set it (25006, as every lease change there).
$node->safe_psql('postgres',
	q{SELECT acquired FROM le_acquire('s', 'a', '1 hour', metadata => '{"addr": "10.0.0.5:8080"}')});
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;
$node->safe_psql('postgres',
	q{SELECT le_set_metadata('s', 'a', fencing_token, '{"addr": "10.0.0.5:8081"}') FROM le_leases WHERE lease_key = 's'});
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', "SELECT metadata->>'addr' FROM le_leases WHERE lease_key = 's'"),
	'10.0.0.5:8081', 'the standby reads the metadata the holder set');
my ($rc, $out, $err) = $standby->psql('postgres',
	q{SELECT le_set_metadata('s', 'a', fencing_token, '1') FROM le_leases WHERE lease_key = 's'});
like($err, qr/cannot change the metadata of a lease while the server is in recovery/, 'and refuses to set it');
$standby->stop;

# Through PgBouncer in transaction mode.
SKIP:
{
	my $via = le_pgbouncer($node, pool_size => 2);
	skip 'pgbouncer not installed', 3 unless defined $via;
	my $b = session($via);
	${ $b->{in} } .= "SELECT acquired, holder FROM le_acquire('k', 'bounced', '1 hour', wait => '60 seconds');\n";
	isnt(sleeping_pid($b), '', 'a waiter through PgBouncer sleeps in the server');
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT le_release('k', 'holder', $token)");
	send_until($b, '', qr/^t\|bounced$/m, 'and gets the lease at the release');
	diag(sprintf('through PgBouncer: release to grant seen by the client %.1f ms', (time - $t0) * 1000));
	${ $b->{in} } .= "\\q\n";
	$b->{h}->finish;
}

done_testing();
