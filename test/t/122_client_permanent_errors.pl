# G6: errors that waiting cannot fix give their documented status at once,
# whatever the wait mode (waiting forever, --wait-timeout, --loop,
# --no-wait): permission denied (SQLSTATE 42501) 77, the extension gone
# 78, a standby named as the only host 76.  A multi-host DSN with a
# standby looks for a read-write host instead.  pg_leader runs with default
# signal dispositions.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeNode;
use LeClientTest;

my $node = le_node('client_permanent', init => { allows_streaming => 1 }, dbs => ['postgres', 'other']);
my $dsn = $node->connstr('postgres');

# Run pg_leader to completion: (exit status, stderr, seconds).
sub cli
{
	my ($out, $err) = ('', '');
	my $t0 = time();
	my $h = IPC::Run::start([ pg_leader_cmd(), @_ ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(20));
	# still waiting after 20 s: 'hung' (SIGTERM ends it)
	my $ok = eval { $h->finish; 1 };
	return ($ok ? $h->result(0) : 'hung', $err, time() - $t0) if $ok;
	$h->signal('TERM');
	eval { $h->finish };
	return ('hung', $err, time() - $t0);
}

# --- permission denied ------------------------------------------------------------
$node->safe_psql('postgres', 'CREATE ROLE bob LOGIN');
for my $mode ([], [ '--wait-timeout', '40s' ], ['--loop'], ['--no-wait'])
{
	my $name = @$mode ? join(' ', @$mode) : 'waiting';
	my ($rc, $err, $secs) = cli('run', '-d', "$dsn user=bob", '-l', 'perm', '--ttl', '3s',
		'--retry', '200ms', @$mode, '--', 'true');
	is($rc, 77, "permission denied, $name: status 77");
	cmp_ok($secs, '<', 10, "permission denied, $name: at once");
	like($err, qr/not_acquired .*permission denied/, "permission denied, $name: logged");
}

# --- the extension dropped while waiting ------------------------------------------------
{
	my $odsn = $node->connstr('other');
	my $holder = IPC::Run::start([ pg_leader_cmd(), 'run', '-d', $odsn, '-l', 'ext', '--ttl', '30s',
		'--', 'sleep', '60' ], '<', \undef, '>', \my $hout, '2>', \my $herr, IPC::Run::timeout(120));
	ok(wait_for(sub { $holder->pump_nb; ($herr // '') =~ /command_started/ }, 30), 'a holder leads');
	my $w = IPC::Run::start([ pg_leader_cmd(), 'run', '-d', $odsn, '-l', 'ext', '--ttl', '3s',
		'--retry', '300ms', '--', 'true' ], '<', \undef, '>', \my $wout, '2>', \my $werr,
		IPC::Run::timeout(120));
	ok(wait_for(sub { $w->pump_nb; ($werr // '') =~ /campaigning/ }, 30), 'a follower waits');
	$holder->signal('KILL');
	eval { $holder->finish };
	$node->safe_psql('other', 'DROP EXTENSION leader_election CASCADE');
	my $t0 = time();
	ok(wait_for(sub { $w->pump_nb; !$w->pumpable }, 20), 'extension dropped: the follower exits');
	eval { $w->finish };
	is($w->result(0), 78, 'with status 78');
	note("after the drop: " . sprintf('%.1f s', time() - $t0));
}

# --- a standby as the only host -------------------------------------------------------------
my $standby = le_standby($node, 'client_permanent_standby');
{
	my ($rc, $err, $secs) = cli('run', '-d', $standby->connstr('postgres'), '-l', 'sb', '--ttl', '3s',
		'--retry', '200ms', '--wait-timeout', '40s', '--', 'true');
	is($rc, 76, 'a standby as the only host, --wait-timeout: status 76');
	cmp_ok($secs, '<', 10, 'at once');
	# two hosts, both the standby: no read-write server, a connection failure as before
	my $h = $standby->host;
	my $p = $standby->port;
	($rc, $err, $secs) = cli('run', '-d', "host=$h,$h port=$p,$p dbname=postgres", '-l', 'sb',
		'--ttl', '3s', '--retry', '200ms', '--wait-timeout', '3s', '--', 'true');
	is($rc, 69, 'a multi-host DSN with no primary: not the standby status (69, no read-write host)');
}

$standby->stop;
$node->stop;
done_testing();
