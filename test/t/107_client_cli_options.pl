# CLI options: --version, LE_DSN, --wait-timeout, a
# second signal forces an immediate stop, --max-runtime and the heartbeat
# file, escaped log values, masked passwords, status alignment with long
# tokens, status --timeout, one timestamp format in logs.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use JSON::PP;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_options');

# Run pg_leader to completion: (exit status, stdout, stderr, seconds).
sub cli
{
	my ($out, $err) = ('', '');
	my $t0 = time();
	IPC::Run::run([ pg_leader_cmd(), @_ ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	return ($? >> 8, $out, $err, time() - $t0);
}

my ($rc, $out, $err, $secs);

# --- --version ------------------------------------------------------------------
($rc, $out) = cli('--version');
is($rc, 0, '--version exits 0');
my ($ctl) = grep { /^default_version/ } split /\n/, slurp_file(($ENV{TESTDIR} // '.') . '/leader_election.control');
my ($ver) = $ctl =~ /'([^']+)'/;
is($out, "pg_leader (leader_election) $ver\n", '--version prints the extension version');
($rc, $out) = cli('run', '--version');
is($rc, 0, 'run --version too');

# --- LE_DSN -----------------------------------------------------------------------
my $envf = "$dir/env";
($rc) = cli('run', '-d', $dsn, '-l', 'dsn-key', '--ttl', '3s', '--',
	'sh', '-c', "printf %s \"\$LE_DSN\" > $envf");
is($rc, 0, 'command ran');
is(slurp_file($envf), $dsn, 'LE_DSN is the connection string given with -d');

# --- --wait-timeout ---------------------------------------------------------------------
$node->safe_psql('postgres', "SELECT le_acquire('busy', 'sql-holder', '5 minutes')");
($rc, $out, $err, $secs) = cli('run', '-d', $dsn, '-l', 'busy', '--retry', '200ms',
	'--wait-timeout', '1s', '--', 'true');
is($rc, 81, '--wait-timeout on a held lease: status 81');
cmp_ok($secs, '<', 5, 'given up after about the timeout');
like($err, qr/not_acquired .*--wait-timeout/, 'not_acquired logged');
like($err, qr/new_leader .*expires=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/,
	'server timestamps in logs are in the same UTC "Z" format as ours');
ok($err !~ /\+00(:00)?\b/, 'no +00:00 timestamps in the log');

# --- --no-wait: distinct statuses -------------------------------------------------------------
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'busy', '--no-wait', '--', 'true');
is($rc, 75, '--no-wait, held by another owner: 75');
$node->safe_psql('postgres', 'CREATE ROLE bob LOGIN');
($rc, $out, $err) = cli('run', '-d', "$dsn user=bob", '-l', 'nw', '--no-wait', '--', 'true');
is($rc, 77, '--no-wait without EXECUTE on le_acquire: permission denied, 77');
like($err, qr/not_acquired .*permission denied/, 'explained');
($rc, $out, $err) = cli('run', '-d', "$dsn options='-c default_transaction_read_only=on'", '-l', 'nw',
	'--no-wait', '--', 'true');
is($rc, 76, '--no-wait on a read-only server (as on a standby, SQLSTATE 25006): 76');
# an attempt that failed with another server error is no "held by another owner"
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'nw', '--ttl', '2h', '--no-wait', '--', 'true');
is($rc, 69, '--no-wait, le_acquire refused (ttl above leader_election.max_ttl): 69');
like($err, qr/not_acquired .*le_acquire failed \(SQLSTATE \w{5}\): .*max_ttl/, 'explained with the SQLSTATE');

# --- new_leader: a free lease is "none" (JSON null), ourselves are named --------------------
# Against 1.1 a follower waits inside the server and is granted the lease at
# the release, so it never sees it free; extension 1.0 (no server-side wait)
# keeps the follower polling, and it sees the free lease between the periods.
{
	$node->safe_psql('postgres', 'CREATE DATABASE free10');
	$node->safe_psql('free10', "CREATE EXTENSION leader_election VERSION '1.0'");
	my $dsn = $node->connstr('free10');
	my $a = start_candidate(dir => $dir, name => 'freeA', dsn => $dsn, key => 'free-key',
		opts => [ '--ttl', '5s' ], command => [ 'sleep', '1' ]);
	ok(wait_for(sub { log_has($a, qr/ command_started /) }, 30), 'freeA leads');
	my $b = start_candidate(dir => $dir, name => 'freeB', dsn => $dsn, key => 'free-key',
		opts => [ '--ttl', '5s', '--log-format', 'json' ], command => [ 'sleep', '0.2' ]);
	ok(wait_for(sub { defined reap($b) }, 30), 'freeB leads after freeA released, then ends');
	my @nl = map { decode_json($_) } grep { /"event":"new_leader"/ } split /\n/, slurp_file($b->{log});
	note join("\n", map { $_->{detail} } @nl);
	ok((grep { exists $_->{holder} && !defined $_->{holder} && $_->{detail} =~ /^holder none/ } @nl),
		'the free lease: JSON holder null, "holder none"');
	ok(!(grep { $_->{detail} =~ /\(null\)/ } @nl), 'never "(null)"');
	ok((grep { ($_->{holder} // '') eq 'freeB' && $_->{detail} =~ /\(ourselves\)/ } @nl),
		'its own period: holder freeB, "(ourselves)"');
	ok(log_has($a, qr/ new_leader .*holder freeA \(ourselves\)/), 'text log: ourselves');
}

# --- a second SIGTERM forces an immediate stop ---------------------------------------------
{
	my $pidf = "$dir/stubborn.pid";
	my $c = start_candidate(dir => $dir, name => 'twice', dsn => $dsn, key => 'twice',
		opts => [ '--ttl', '20s', '--grace', '5s' ],
		command => [ 'sh', '-c', "echo \$\$ > $pidf; trap '' TERM; while :; do sleep 0.1; done" ]);
	ok(wait_for(sub { -s $pidf }, 30), 'command ignoring SIGTERM runs');
	chomp(my $pid = slurp_file($pidf));
	kill 'TERM', $c->{pid};
	ok(wait_for(sub { log_has($c, qr/stopping_command .*reason=shutdown/) }, 5), 'first SIGTERM: stopping');
	usleep(300_000);    # a signal from the same sender within 200 ms is the same one
	my $t0 = time();
	kill 'TERM', $c->{pid};
	my $w = wait_for(sub { defined reap($c) }, 10);
	ok(defined $w, 'second SIGTERM: pg_leader exits');
	cmp_ok($w, '<', 2, 'without waiting for the 5 s grace period');
	note(sprintf('second SIGTERM -> exit %.0f ms', 1000 * $w));
	is($c->{status}, 143, 'status 128 + SIGTERM');
	ok(log_has($c, qr/killing_command .*second signal/), 'SIGKILL for the second signal logged');
	ok(!alive($pid), 'the command is gone');
	like(lease_state($node, 'twice'), qr/\|f$/, 'the lease was released');
}

# --- --max-runtime --------------------------------------------------------------------------
($rc, $out, $err, $secs) = cli('run', '-d', $dsn, '-l', 'maxrt', '--ttl', '3s', '--grace', '200ms',
	'--max-runtime', '1s', '--', 'sleep', '30');
is($rc, 80, '--max-runtime: the command is stopped, status 80');
cmp_ok($secs, '<', 6, 'after about the maximum runtime');
like($err, qr/stopping_command .*reason=max_runtime/, 'reason max_runtime logged');
is($node->safe_psql('postgres', "SELECT end_reason FROM le_lease_history WHERE lease_key = 'maxrt'"),
	'released', 'and the lease released');

# --- heartbeat file ---------------------------------------------------------------------------
my $hb = "$dir/hb";
($rc, $out, $err, $secs) = cli('run', '-d', $dsn, '-l', 'hb', '--ttl', '3s', '--grace', '200ms',
	'--heartbeat-file', $hb, '--heartbeat-timeout', '1s',
	'--', 'sh', '-c', "for i in 1 2 3 4 5 6 7 8; do touch $hb; sleep 0.2; done; sleep 30");
is($rc, 80, 'heartbeat missed: status 80');
cmp_ok($secs, '>', 2, 'not while the command touched its heartbeat file');
like($err, qr/stopping_command .*reason=heartbeat_timeout/, 'reason heartbeat_timeout logged');
($rc) = cli('run', '-d', $dsn, '-l', 'hb');
is($rc, 64, 'run without a command: usage');
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'hb', '--heartbeat-file', $hb, '--', 'true');
is($rc, 64, '--heartbeat-file without --heartbeat-timeout: usage (64)');

# --- escaped log values -----------------------------------------------------------------------
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', "evil\n2026-01-01T00:00:00.000Z pg_leader[1] acquired key=x",
	'--ttl', '3s', '--', 'true');
is($rc, 0, 'a key with a newline works');
my @forged = grep { /^2026-01-01T00:00:00/ } split /\n/, $err;
is(scalar @forged, 0, 'a newline in the key cannot forge a log line');
like($err, qr/key=evil\\n2026-01-01/, 'it is shown escaped');

# --- passwords are never echoed ---------------------------------------------------------------
($rc, $out, $err) = cli('run', '-d', "$dsn password=sekret1 bogus", '-l', 'k', '--', 'true');
is($rc, 64, 'bad connection string with a password: usage');
unlike($err, qr/sekret1/, 'its password is not echoed');
like($err, qr/password=\*\*\*\*/, 'but masked');
($rc, $out, $err) = cli('status', '-d', 'postgresql://u:sekret2@[::1/db');
is($rc, 64, 'bad URI: usage');
unlike($err, qr/sekret2/, 'the URI password is not echoed, not even in libpq\'s message');

# --- bad input ends quickly with a usage error (sweep findings) -----------------------------
# a 100 kB connection string that is not a DSN: the password masking used to loop forever
{
	my ($o, $e) = ('', '');
	my $t0 = time();
	my $ok = eval {
		IPC::Run::run([ pg_leader_cmd(), 'status', '-d', 'x' x 100000 ], '<', \undef, '>', \$o, '2>', \$e,
			IPC::Run::timeout(30));
		1;
	};
	ok($ok, 'status with a 100 kB non-DSN connection string ends');
	is($ok ? $? >> 8 : 'hung', 64, 'with a usage error');
	cmp_ok(length($e), '<', 10000, 'without echoing all of it');
}
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', "\xc3\x28\xff", '--no-wait', '--', 'true');
is($rc, 64, 'invalid UTF-8 lease key: usage (64), not sent to the server');
like($err, qr/lease key is not valid UTF-8/, 'explained');
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'k-utf8', '--owner', "o\xed\xa0\x80", '--no-wait', '--', 'true');
is($rc, 64, 'invalid UTF-8 owner id (a surrogate): usage (64)');
like($err, qr/owner id is not valid UTF-8/, 'explained');
($rc, $out, $err) = cli('release', '-d', $dsn, '-l', "\xc3\x28", '--owner', 'o', '--token', '1');
is($rc, 64, 'release: invalid UTF-8 lease key: usage (64)');
($rc, $out, $err) = cli('status', '-d', $dsn, '-l', "\xff");
is($rc, 64, 'status: invalid UTF-8 lease key: usage (64)');
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', "k-\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", '--no-wait', '--', 'true');
is($rc, 0, 'a key with 2-, 3- and 4-byte UTF-8 characters works');
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'k-stmt', '--no-wait', '--statement-timeout=1ms', '--', 'true');
is($rc, 64, '--statement-timeout below 100ms: usage (64)');
is($node->safe_psql('postgres', "SELECT (SELECT count(*) FROM le_lease WHERE lease_key = 'k-stmt') + (SELECT count(*) FROM le_lease_history WHERE lease_key = 'k-stmt')"), '0',
	'and nothing was acquired');
# an acquire that times out on our side but is granted on the server afterwards: the row
# lock held here makes le_acquire wait past --statement-timeout; the grant commits when
# the lock goes, under pg_leader's own owner id, and pg_leader must not leave it held
$node->safe_psql('postgres', "SELECT le_acquire('k-unknown', 'sql-o', '1 minute'); SELECT le_force_release('k-unknown')");
my $rowlock = IPC::Run::start(
	[ 'psql', '-X', '-q', '-d', $dsn, '-c',
	  "BEGIN; SELECT 1 FROM le_lease WHERE lease_key = 'k-unknown' FOR UPDATE; SELECT pg_sleep(1.5); COMMIT;" ],
	'>', \my $rlo, '2>', \my $rle);
wait_for(sub { $node->safe_psql('postgres', "SELECT count(*) FROM pg_locks WHERE relation = 'le_lease'::regclass AND mode = 'RowShareLock' AND granted AND pid <> pg_backend_pid()") eq '1' }, 10);
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'k-unknown', '--ttl', '30s', '--no-wait',
	'--statement-timeout=300ms', '--', 'true');
$rowlock->finish;
is($rc, 81, 'acquire timed out: 81');
is($node->safe_psql('postgres', "SELECT count(*) FROM le_leases WHERE lease_key = 'k-unknown' AND is_valid"), '0',
	'the late grant under pg_leader\'s owner id was released, not left until its ttl ends');
like($err, qr/held under our owner id after an acquire timed out/, 'and that is logged');
for my $hb ('', '/', "$dir/no-such-dir/hb", "$dir/" . ('x' x 5000))
{
	($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'k-hb', '--no-wait', '--heartbeat-timeout=1h',
		"--heartbeat-file=$hb", '--', 'true');
	is($rc, 64, '--heartbeat-file "' . substr($hb, 0, 40) . '": usage (64)');
}
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'k-hb', '--no-wait', '--heartbeat-timeout=1h',
	"--heartbeat-file=$dir/hb-new", '--', 'true');
is($rc, 0, '--heartbeat-file in an existing directory (the file need not exist yet)');

# --- status: columns wide enough for long tokens; --timeout ---------------------------------
$node->safe_psql('postgres', "SELECT le_acquire('long-token', 'o1', '1 minute')");
$node->safe_psql('postgres', "UPDATE le_lease SET fencing_token = 1234567890123 WHERE lease_key = 'long-token'");
($rc, $out) = cli('status', '-d', $dsn);
my @rows = split /\n/, $out;
my ($row) = grep { /^long-token / } @rows;
my $end_hdr = index($rows[0], 'token') + length('token');
my $end_tok = index($row, '1234567890123') + 13;
is($end_tok, $end_hdr, 'status: a 13-digit token stays in its column');
is(index($row, ' ' . ($row =~ /(\S+Z)/)[0]), index($rows[0], ' acquired_at'), 'and the next column too');

my $lock = IPC::Run::start(
	[ 'psql', '-X', '-q', '-d', $dsn, '-c', 'BEGIN; LOCK TABLE le_lease; SELECT pg_sleep(30);' ],
	'>', \my $lo, '2>', \my $le);
wait_for(sub { $node->safe_psql('postgres', "SELECT count(*) FROM pg_locks WHERE relation = 'le_lease'::regclass AND mode = 'AccessExclusiveLock' AND granted") eq '1' }, 10);
($rc, $out, $err, $secs) = cli('status', '-d', $dsn, '--timeout', '1s');
is($rc, 81, 'status --timeout: status 81 when the server does not answer in time');
cmp_ok($secs, '<', 5, 'after about the timeout');
like($err, qr/no answer within --timeout/, 'explained');
$lock->kill_kill;

stop_all();
$node->stop;
done_testing();
