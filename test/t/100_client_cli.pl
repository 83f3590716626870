# G5, G9: pg_leader CLI and client library: usage errors and exit statuses, the
# child's environment, loss of leadership, status/release, log formats,
# and the C API used directly.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_cli');
$node->safe_psql('postgres', 'CREATE DATABASE noext');
my @pgl = pg_leader_cmd();

# Run pg_leader to completion: (exit status, stdout, stderr).
sub cli
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ @pgl, @_ ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	return ($? >> 8, $out, $err);
}

my ($rc, $out, $err);

# --- usage, bad input, documented exit statuses ---------------------------
($rc, $out) = cli('--help');
is($rc, 0, '--help exits 0');
like($out, qr/Exit status of run/, '--help documents exit statuses');

($rc, $out, $err) = cli();
is($rc, 64, 'no subcommand: bad usage (64)');

($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'k', '--ttl', '15', '--', 'true');
is($rc, 64, 'duration without unit: bad usage (64)');
like($err, qr/invalid duration for --ttl: "15"/, 'bad duration is named');

($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'k', '--ttl', '-2s', '--', 'true');
is($rc, 64, 'negative duration: bad usage (64)');

($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'k', '--ttl', '15s', '--renew', '10s', '--', 'true');
is($rc, 64, 'renew interval not well below ttl: bad usage (64)');
like($err, qr/renew interval .* must be at most half/, 'renew/ttl rule explained');

($rc, $out, $err) = cli('run', '-d', 'foo bar', '-l', 'k', '--', 'true');
is($rc, 64, 'bad connection string: bad usage (64)');
like($err, qr/invalid connection string/, 'bad connection string explained');

($rc, $out, $err) = cli('run', '-d', "host=$dir port=1 dbname=postgres", '-l', 'k', '--', 'true');
is($rc, 69, 'unreachable server: connection failure (69)');
like($err, qr/could not connect to the server/, 'unreachable server explained');

(my $noext = $dsn) =~ s/dbname='?postgres'?/dbname=noext/;
($rc, $out, $err) = cli('run', '-d', $noext, '-l', 'k', '--', 'true');
is($rc, 78, 'extension missing: status 78');
like($err, qr/extension "leader_election" is not installed in database "noext"/,
	'missing extension explained');
($rc, $out, $err) = cli('status', '-d', $noext);
is($rc, 78, 'status without extension: status 78');

# --- the command's environment and exit status ----------------------------
my $envfile = "$dir/env.txt";
($rc, $out, $err) = cli(
	'run', '-d', $dsn, '-l', 'env-key', '--owner', 'env-owner', '--ttl', '3s',
	'--log-format', 'json',
	'--', 'sh', '-c', "env | grep '^LE_' | sort > $envfile; exit 7");
is($rc, 7, 'run exits with the command\'s status');
my %env = map { split /=/, $_, 2 } split /\n/, slurp_file($envfile);
is($env{LE_LEASE_KEY}, 'env-key', 'LE_LEASE_KEY set');
is($env{LE_OWNER_ID}, 'env-owner', 'LE_OWNER_ID set');
like($env{LE_FENCING_TOKEN}, qr/^[1-9][0-9]*$/, 'LE_FENCING_TOKEN set');
like($env{LE_EXPIRES_AT}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, 'LE_EXPIRES_AT is ISO 8601 UTC');
is( $node->safe_psql('postgres',
		"SELECT fencing_token || ' ' || end_reason FROM le_lease_history WHERE lease_key = 'env-key'"),
	"$env{LE_FENCING_TOKEN} released",
	'the command ran with the granted token, and the lease was released when it ended');

# every log line is one JSON object with the documented fields
my @lines = grep { /\S/ } split /\n/, $err;
my @events;
my $json_ok = @lines > 0;
for my $l (@lines)
{
	my $o = eval { decode_json($l) };
	if (!$o || !exists $o->{ts} || !exists $o->{token} || $o->{lease_key} ne 'env-key' || $o->{owner} ne 'env-owner')
	{
		$json_ok = 0;
		diag("not a proper JSON log line: $l");
		next;
	}
	push @events, $o->{event};
}
ok($json_ok, '--log-format json: one JSON object per line with ts, event, lease_key, owner, token');
is_deeply([ grep { /acquired|command_started|command_exited|stopped_leading|exit/ } @events ],
	[qw(acquired command_started command_exited stopped_leading exit)],
	'events logged in order');

($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'nocmd', '--', "$dir/does-not-exist");
is($rc, 127, 'a command that cannot be run exits 127');

# --- --no-wait ---------------------------------------------------------------
$node->safe_psql('postgres', "SELECT acquired FROM le_acquire('busy', 'sql-holder', '5 minutes')");
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'busy', '--no-wait', '--', 'true');
is($rc, 75, '--no-wait on a held lease: not acquired (75)');
unlike($err, qr/the server waits for the lease/, '--no-wait makes a single try, no wait inside the server');
like($err, qr/not_acquired .*held by sql-holder/, 'not acquired is logged with the holder');

# --- leadership lost while the command runs ---------------------------------
my $job = write_job($dir, "$dir/lost.events", 0);
my $c = start_candidate(dir => $dir, name => 'loser', dsn => $dsn, key => 'lost-key',
	opts => [ '--ttl', '3s', '--grace', '1s', '-v' ], command => [$job]);
ok(wait_for(sub { lease_state($node, 'lost-key') =~ /^loser\|\d+\|t$/ }, 30), 'candidate leads');
ok(wait_for(sub { log_has($c, qr/ renewed /) }, 10), '-v logs renewals');
$node->safe_psql('postgres', "SELECT le_force_release('lost-key')");
ok(wait_for(sub { defined reap($c) }, 20), 'wrapper exits after the lease was taken away');
is($c->{status}, 79, 'leadership lost: status 79');
ok(log_has($c, qr/stopped_leading .*reason=lost/), 'stop reason "lost" logged');
my @ev = read_events("$dir/lost.events");
is($ev[-1][0], 'stop', 'the command was stopped (SIGTERM) when leadership was lost');

# --- a command that ignores SIGTERM gets SIGKILL after the grace period -------
my $stubborn = "$dir/stubborn.sh";
open(my $sfh, '>', $stubborn) or die;
print $sfh "#!/bin/sh\ntrap '' TERM\necho \$\$ > $dir/stubborn.pid\nwhile :; do sleep 0.1; done\n";
close($sfh);
chmod 0755, $stubborn;
my $s = start_candidate(dir => $dir, name => 'stubborn', dsn => $dsn, key => 'stubborn-key',
	opts => [ '--ttl', '3s', '--grace', '1s' ], command => [$stubborn]);
ok(wait_for(sub { -s "$dir/stubborn.pid" }, 30), 'stubborn command runs');
$node->safe_psql('postgres', "SELECT le_force_release('stubborn-key')");
ok(wait_for(sub { defined reap($s) }, 20), 'wrapper exits although its command ignores SIGTERM');
is($s->{status}, 79, 'leadership lost: status 79');
ok(log_has($s, qr/killing_command .*SIGKILL/), 'SIGKILL after the grace period is logged');
ok(log_has($s, qr/command_exited .*status 137/), 'the command died of SIGKILL (137)');
chomp(my $spid = slurp_file("$dir/stubborn.pid"));
ok(!alive($spid), 'and is gone');

# --- SIGKILL of the wrapper: its whole process group goes, grandchildren too ---
my $g = start_candidate(dir => $dir, name => 'grand', dsn => $dsn, key => 'grand-key',
	opts => [ '--ttl', '3s' ], command => [ 'sh', '-c', "sleep 300 & echo \$! > $dir/grand.pid; wait" ]);
ok(wait_for(sub { -s "$dir/grand.pid" }, 30), 'command with a background grandchild runs');
chomp(my $gpid = slurp_file("$dir/grand.pid"));
kill 'KILL', $g->{pid};
ok(wait_for(sub { !alive($gpid) }, 10), 'after SIGKILL of the wrapper its watchdog kills the grandchild too');

# --- a renewal error that retrying cannot fix: renew_failed, as a non-superuser ---
$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval, interval, jsonb), le_renew(text, text, bigint, interval),
		le_release(text, text, bigint) TO alice;
});
(my $alice = $dsn) =~ s/$/ user=alice/;
my $job2 = write_job($dir, "$dir/revoked.events", 0);
my $r = start_candidate(dir => $dir, name => 'revoked', dsn => $alice, key => 'revoked-key',
	opts => [ '--ttl', '3s', '--grace', '1s', '-v' ], command => [$job2]);
ok(wait_for(sub { log_has($r, qr/ renewed /) }, 30), 'a non-superuser granted EXECUTE leads and renews');
$node->safe_psql('postgres', 'REVOKE EXECUTE ON FUNCTION le_renew(text, text, bigint, interval) FROM alice');
ok(wait_for(sub { defined reap($r) }, 20), 'wrapper exits when renewal is refused');
is($r->{status}, 79, 'leadership lost: status 79');
ok(log_has($r, qr/stopped_leading .*reason=renew_failed: SQLSTATE 42501/),
	'stop reason renew_failed with the SQLSTATE, without waiting for the deadline');
@ev = read_events("$dir/revoked.events");
is($ev[-1][0], 'stop', 'the command was stopped');

# --- status and release ---------------------------------------------------------
my $tok = $node->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('rel-key', 'o1', '1 minute')");
($rc, $out) = cli('status', '-d', $dsn);
is($rc, 0, 'status exits 0');
like($out, qr/^lease_key\s+holder\s+role\s+token\s+acquired_at\s+expires_at\s+valid\s+remaining\s+transitions\s+metadata$/m, 'status table header');
like($out, qr/^rel-key\s+o1\s+\S+\s+$tok\s+\S+Z\s+\S+Z\s+yes\s/m, 'status table row');
($rc, $out) = cli('status', '-d', $dsn, '-l', 'rel-key', '--json');
my $st = decode_json($out);
is(scalar @$st, 1, 'status --json -l KEY: one lease');
is($st->[0]{holder} . ' ' . $st->[0]{fencing_token} . ' ' . ($st->[0]{is_valid} ? 'valid' : 'invalid'),
	"o1 $tok valid", 'status --json fields');
is($st->[0]{metadata}, undef, 'status --json: no metadata published');
$node->safe_psql('postgres', qq{SELECT le_set_metadata('rel-key', 'o1', $tok, '{"addr": "10.0.0.5:8080"}')});
($rc, $out) = cli('status', '-d', $dsn, '-l', 'rel-key', '--json');
is(decode_json($out)->[0]{metadata}{addr}, '10.0.0.5:8080', 'status --json shows the metadata as JSON');
($rc, $out) = cli('status', '-d', $dsn, '-l', 'rel-key');
like($out, qr/^rel-key\s.*\{"addr": "10.0.0.5:8080"\}$/m, 'status shows the metadata last');
($rc, $out, $err) = cli('status', '-d', $dsn, '-l', 'no-such-key');
is($rc, 1, 'status of an unknown lease exits 1');

($rc, $out, $err) = cli('release', '-d', $dsn, '-l', 'rel-key', '--owner', 'o1', '--token', $tok + 1);
is($rc, 1, 'release with a wrong token: not released (1)');
($rc, $out, $err) = cli('release', '-d', $dsn, '-l', 'rel-key', '--owner', 'o1', '--token', $tok);
is($rc, 0, 'release with the right owner and token exits 0');
is(lease_state($node, 'rel-key'), "-|$tok|f", 'lease released');
($rc, $out, $err) = cli('release', '-d', $dsn, '-l', 'rel-key', '--owner', 'o1');
is($rc, 64, 'release without --token: bad usage');

# --- run --metadata ----------------------------------------------------------------
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'meta-key', '--ttl', '5s', '--metadata', '{"addr": "10.0.0.5:8080"}',
	'--', 'sh', '-c', "psql -XAtq -d '$dsn' -c \"SELECT metadata->>'addr' FROM le_leases WHERE lease_key = 'meta-key'\" > $dir/meta.out");
is($rc, 0, 'run --metadata: the command ran');
is(slurp_file("$dir/meta.out"), "10.0.0.5:8080\n", 'while it led, the lease carried the metadata');
is($node->safe_psql('postgres', "SELECT metadata IS NULL FROM le_leases WHERE lease_key = 'meta-key'"), 't',
	'the release at its end cleared it');
($rc, $out, $err) = cli('run', '-d', $dsn, '-l', 'meta-key', '--metadata', '{bad', '--', 'true');
is($rc, 64, 'run --metadata with invalid JSON: bad usage (64)');
like($err, qr/metadata refused by the server: 22P02/, 'with the server\'s SQLSTATE');

# --- the C API, compiled against the built header and static library ----------
SKIP:
{
	my $cc = `sh -c 'command -v cc'`;
	skip 'no C compiler', 6 unless $cc;
	my $src = "$dir/api.c";
	open(my $fh, '>', $src) or die;
	print $fh <<'EOF';
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "le_client.h"
static int started, stopped_released, stopped_shutdown;
static void on_started(void *a, const le_lease_info *l) { (void) a; (void) l; started++; }
static void on_stopped(void *a, const le_lease_info *l, le_stop_reason r, const char *d)
{ (void) a; (void) l; (void) d; if (r == LE_STOP_RELEASED) stopped_released++; if (r == LE_STOP_SHUTDOWN) stopped_shutdown++; }
int main(int argc, char **argv)
{
	le_config c; le_elector *e; char err[512]; int64_t ms; le_lease_info l1, l2;
	(void) argc;
	printf("durations %d %d %d %d\n", le_parse_duration_ms("15s", &ms) && ms == 15000,
		   le_parse_duration_ms("500ms", &ms) && ms == 500, le_parse_duration_ms("2m", &ms) && ms == 120000,
		   !le_parse_duration_ms("15", &ms) && !le_parse_duration_ms("0s", &ms));
	le_config_init(&c);
	c.conninfo = argv[1]; c.lease_key = "api-key"; c.ttl_ms = 2000; c.retry_ms = 200;
	c.on_started = on_started; c.on_stopped = on_stopped;
	c.renew_ms = 1500;
	printf("bad renew rejected %d\n", le_elector_create(&c, err, sizeof err) == NULL);
	c.renew_ms = 0;
	e = le_elector_create(&c, err, sizeof err);
	if (!e || le_elector_start(e, err, sizeof err) != LE_OK) { printf("error %s\n", err); return 1; }
	printf("leader %d\n", le_elector_wait_leader(e, 10000) && le_elector_is_leader(e, &l1));
	le_elector_resign(e);
	printf("after resign leader %d\n", le_elector_is_leader(e, NULL));
	printf("leader again %d\n", le_elector_wait_leader(e, 10000) && le_elector_is_leader(e, &l2));
	printf("new token higher %d\n", l2.fencing_token > l1.fencing_token);
	le_elector_stop(e);
	printf("callbacks %d %d %d\n", started, stopped_released, stopped_shutdown);
	le_elector_destroy(e);
	return 0;
}
EOF
	close($fh);
	my $inc = `pg_config --includedir`;
	chomp $inc;
	my $cdir = ($ENV{TESTDIR} // '.') . '/src/client';
	my ($cout, $cerr) = ('', '');
	my $ok = IPC::Run::run(
		[ 'cc', '-Wall', '-Wextra', '-Werror', '-pthread', "-I$cdir", "-I$inc", $src,
		  "$cdir/libleader_election_client.a", '-lpq', '-o', "$dir/api" ],
		'>', \$cout, '2>', \$cerr);
	ok($ok, 'a program using le_client.h links against the static library') or diag($cerr);
	IPC::Run::run([ "$dir/api", $dsn ], '>', \$cout, '2>', \$cerr, IPC::Run::timeout(60));
	like($cout, qr/^durations 1 1 1 1$/m, 'le_parse_duration_ms: 15s, 500ms, 2m accepted, no unit and 0s rejected');
	like($cout, qr/^bad renew rejected 1$/m, 'renew interval not well below ttl rejected');
	like($cout, qr/^leader 1\nafter resign leader 0\nleader again 1$/m, 'lead, resign, lead again');
	like($cout, qr/^new token higher 1$/m, 'a new leadership period has a higher token');
	like($cout, qr/^callbacks 2 1 1$/m, 'started twice, stopped with reasons released and shutdown');
}

stop_all();
$node->stop;
done_testing();
