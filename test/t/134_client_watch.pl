# G3, G11: "pg_leader watch" prints every change of a lease as it happens,
# in order: grants with their rising tokens, a renewal (-v), an expiry that
# nobody took over (found by polling: expiries send no NOTIFY), a release, a
# force release; each event matches the server's history.  A period that
# leader_election.history = off left unrecorded is seen granted and ended.  A forged NOTIFY
# payload prints nothing (watch reads the tables, never the payload).
# Without -l it holds no le_watch lock per lease (those would fill the
# shared lock table); a key posing as further fields of a text line is
# escaped; a token going back (the extension created again) is a reset.
# SIGTERM and SIGINT end it with status 0, so does a reader that went
# away; a bad --poll is a usage error (64).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use JSON::PP;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_watch');
my @pgl = pg_leader_cmd();

sub sql { return $node->safe_psql('postgres', $_[0]); }

my ($in, $out, $err) = ('', '', '');
my $h = IPC::Run::start([ @pgl, 'watch', '-d', $dsn, '-l', 'k', '--json', '-v', '--poll', '100ms' ],
	\$in, '>', \$out, '2>', \$err, IPC::Run::timeout(60));

# Events printed so far (complete lines), decoded.
sub events
{
	$h->pump_nb if $h->pumpable;
	return map { decode_json($_) } grep { length } split /\n/, ($out =~ s/[^\n]*\z//r);
}

# Wait until watch printed $n events; returns them.
sub wait_events
{
	my ($n) = @_;
	my @e;
	wait_for(sub { @e = events(); @e >= $n }, 10);
	return @e;
}

ok(wait_for(sub { $h->pump_nb; $err =~ /watching lease "k"/ }, 10), 'watch is ready') or diag($err);

my $t1 = sql("SELECT fencing_token FROM le_acquire('k', 'alice', '1 second')");
my @e = wait_events(1);
# the session-level locks (le_watch) that watch sessions hold
sub watch_locks
{
	return sql("SELECT count(*) FROM pg_locks l "
		  . "WHERE l.pid <> pg_backend_pid() AND l.locktype = 'advisory'");
}
is(watch_locks(), 1, 'watch -l watches its lease (one lock)');
# alice lets her lease expire: no NOTIFY, no takeover; only a poll sees it
@e = wait_events(2);
my $t2 = sql("SELECT fencing_token FROM le_acquire('k', 'bob', '30 seconds')");
@e = wait_events(3);
sql("SELECT le_renew('k', 'bob', $t2, '40 seconds')");
@e = wait_events(4);
# a forged payload: anyone may NOTIFY; nothing happened to the lease
sql(q{NOTIFY leader_election, '{"event":"released","lease_key":"k","holder":null,"fencing_token":99,"expires_at":null}'});
usleep(400_000);
is(scalar(events()), 4, 'a forged NOTIFY prints nothing');
sql("SELECT le_release('k', 'bob', $t2)");
@e = wait_events(5);
my $t3 = sql("SELECT fencing_token FROM le_acquire('k', 'carol', '30 seconds')");
@e = wait_events(6);
sql("SELECT le_force_release('k')");
@e = wait_events(7);
# two changes within one poll (one transaction, so no poll can fall between
# them): both are explained from the history
my $t4 = sql("SELECT a.fencing_token FROM le_acquire('k', 'alice', '30 seconds') a, "
	  . "LATERAL le_release('k', 'alice', a.fencing_token) r");
@e = wait_events(9);
# a period the history does not record: granted from the lease row, "ended"
my $t6 = sql("SET leader_election.history = off; SELECT fencing_token FROM le_acquire('k', 'erin', '30 seconds')");
@e = wait_events(10);
sql("SELECT le_release('k', 'erin', $t6)");
@e = wait_events(11);
usleep(300_000);

$h->signal('TERM');
$h->finish;
is($? >> 8, 0, 'SIGTERM ends watch with status 0');
@e = events();

is_deeply([ map { "$_->{event} $_->{fencing_token} " . ($_->{holder} // '-') } @e ],
	[
		"granted $t1 alice", "expired $t1 alice", "granted $t2 bob", "renewed $t2 bob",
		"released $t2 bob", "granted $t3 carol", "force_released $t3 carol",
		"granted $t4 alice", "released $t4 alice", "granted $t6 erin", "ended $t6 erin"
	],
	'the events in order') or diag($out);

# every event as the server recorded it
my %hist = map { my @f = split /\|/; ($f[0] => \@f) } split /\n/, sql(
	"SELECT fencing_token, holder, to_char(timezone('UTC', acquired_at), 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
	  . "to_char(timezone('UTC', ended_at), 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), end_reason "
	  . "FROM le_lease_history WHERE lease_key = 'k'");
ok(!exists $hist{$t6}, "period $t6 is not in the history");
for my $ev (@e)
{
	my $p = $hist{ $ev->{fencing_token} };
	next if $ev->{event} eq 'renewed' || $ev->{fencing_token} == $t6;
	is($ev->{holder}, $p->[1], "$ev->{event} $ev->{fencing_token}: holder as recorded");
	my $ts = $ev->{event} eq 'granted' ? $p->[2] : $p->[3];
	is($ev->{ts}, $ts, "$ev->{event} $ev->{fencing_token}: time as recorded");
	is($ev->{event}, $p->[4], "end of $ev->{fencing_token} as recorded")
	  if $ev->{event} ne 'granted';
}
cmp_ok($e[-1]{ts}, 'ge', $e[-2]{ts}, 'the unrecorded period ends after its grant');
is($e[0]{expires_at}, $e[1]{ts}, 'a grant seen current carries its expiry');
is($e[7]{expires_at}, undef, 'a grant already ended when seen carries none');
my @ts = map { $_->{ts} } @e;
is_deeply(\@ts, [ sort @ts ], 'events in time order');

# text form, and bad usage
my ($rc, $o2, $e2) = ('', '', '');
IPC::Run::run([ @pgl, 'watch', '-d', $dsn, '--poll', 'soon' ], '<', \undef, '>', \$o2, '2>', \$e2);
is($? >> 8, 64, 'bad --poll: bad usage (64)');
IPC::Run::run([ @pgl, 'watch', '-d', $dsn, '--svg', 'x.svg' ], '<', \undef, '>', \$o2, '2>', \$e2);
is($? >> 8, 64, 'watch --svg: bad usage (64)');

($out, $err) = ('', '');
$h = IPC::Run::start([ @pgl, 'watch', '-d', $dsn, '--poll', '100ms' ],
	\$in, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
ok(wait_for(sub { $h->pump_nb; $err =~ /watching every lease/ }, 10), 'watch of every lease is ready');
my $t5 = sql("SELECT fencing_token FROM le_acquire('other', 'dave', '30 seconds')");
ok(wait_for(sub { $h->pump_nb; $out =~ /\n/ }, 10), 'a new lease is seen');
like($out, qr/^\S+Z granted key=other token=$t5 holder=dave expires=\S+Z\n/, 'text line of a grant');
# a key and holder that pose as further fields, or turn the line around
my $t8 = sql(q{SELECT fencing_token FROM le_acquire('k4 token=5 holder=mallory', E'h\u202Ex\u0085"', '30 seconds')});
ok(wait_for(sub { $h->pump_nb; $out =~ /holder=h\\u202e/ }, 10), 'the odd key is seen');
like($out, qr/^\S+Z granted key=k4\\x20token\\x3d5\\x20holder\\x3dmallory token=$t8 holder=h\\u202ex\\u0085\\x22 expires=\S+Z\n/m,
	'text fields cannot be forged: spaces, =, quotes, C1 and bidi controls escaped');
# without -l, watch polls: one le_watch lock per lease would fill the
# shared lock table of a cluster with many leases
sql("SELECT le_acquire('many' || i, 'h', '30 seconds') FROM generate_series(1, 40) i");
ok(wait_for(sub { $h->pump_nb; $out =~ /key=many40 / }, 10), 'forty new leases are seen');
is(watch_locks(), 0, 'watch of every lease holds no lock per lease');
$h->signal('INT');
$h->finish;
is($? >> 8, 0, 'SIGINT ends watch with status 0');

# a reader that goes away ends watch (SIGPIPE is ignored: EPIPE)
my $sh = join(' ', map { "'$_'" } @pgl, 'watch', '-d', $dsn, '-l', 'k3', '--poll', '100ms');
($out, $err) = ('', '');
$h = IPC::Run::start([ 'sh', '-c', "$sh | head -n 1; echo head-done" ], \$in, '>', \$out, '2>', \$err,
	IPC::Run::timeout(60));
ok(wait_for(sub { $h->pump_nb; $err =~ /watching lease "k3"/ }, 10), 'watch into a pipe is ready');
my $t7 = sql("SELECT fencing_token FROM le_acquire('k3', 'fay', '30 seconds')");
ok(wait_for(sub { $h->pump_nb; $out =~ /granted key=k3 token=$t7 holder=fay expires=\S+Z\n/ }, 10),
	'the reader got the grant, and left');
sql("SELECT le_release('k3', 'fay', $t7)");
ok(wait_for(sub { $h->pump_nb if $h->pumpable; $out =~ /head-done/ }, 10), 'watch ends at its next line');
$h->finish;

# the extension dropped and created again: tokens start anew, told as a reset
($out, $err) = ('', '');
$h = IPC::Run::start([ @pgl, 'watch', '-d', $dsn, '-l', 'k', '--json', '--poll', '100ms' ],
	\$in, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
ok(wait_for(sub { $h->pump_nb; $err =~ /watching lease "k"/ }, 10), 'watch before a reset is ready');
my $t9 = sql("SELECT fencing_token FROM le_acquire('k', 'gus', '30 seconds')");
@e = wait_events(1);
sql("BEGIN; DROP EXTENSION leader_election CASCADE; CREATE EXTENSION leader_election; COMMIT");
my $t10 = sql("SELECT fencing_token FROM le_acquire('k', 'hal', '30 seconds')");
ok($t10 < $t9, "tokens start anew ($t10 after $t9)");
@e = wait_events(2);
is_deeply([ map { "$_->{event} $_->{fencing_token} " . ($_->{holder} // '-') } @e[ 0, 1 ] ],
	[ "granted $t9 gus", "reset $t10 hal" ], 'a token going back is told as a reset') or diag($out, $err);
$h->signal('TERM');
$h->finish;

$node->stop;
done_testing();
