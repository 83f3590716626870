# G1 (atomic acquisition) and G3 (tokens strictly rise,
# never repeat) under load: 10 pgbench clients acquire, renew and release
# three leases with short ttls for about 10 seconds, so that leases are
# released, lapse and are taken over, and holders whose lease lapsed
# campaign again with the same owner id.  Then le_lease_history must show,
# per key: tokens strictly rising in the order of acquired_at, never repeated;
# each ownership period ended before the next one began (no overlap); the
# final le_lease token is the largest in the history.  Any client error
# (deadlock, lock timeout, ...) makes pgbench, and so the test, fail.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;

my $clients = 10;
my $seconds = 10;

my $node = le_node('many_clients', conf => "max_connections = 40\n");

# Owner ids are per client ('c<client>-<1..3>'), so a client sometimes
# campaigns again under the id whose lease just lapsed or was released.
# One transaction in 20 is a holder that dies at once: an owner id never
# used again, so its lease can only lapse and be taken over (on a quick
# machine the other holders always came back in time, and nothing lapsed).
my $script = <<'EOS';
\set k random(1, 3)
\set o random(1, 3)
\set ttl random(20, 150)
\set ghost random(0, 19)
\if :ghost = 0
\set g random(1, 1000000000)
SELECT le_acquire('many-' || :k, 'gone-' || :client_id || '-' || :g, make_interval(secs => :ttl / 1000.0));
\else
SELECT acquired::int AS got, coalesce(fencing_token, 0) AS tok FROM le_acquire('many-' || :k, 'c' || :client_id || '-' || :o, make_interval(secs => :ttl / 1000.0)) \gset
\if :got
SELECT le_renew('many-' || :k, 'c' || :client_id || '-' || :o, :tok, make_interval(secs => :ttl / 1000.0));
\set rel random(0, 1)
\if :rel
SELECT le_release('many-' || :k, 'c' || :client_id || '-' || :o, :tok);
\endif
\endif
\endif
EOS

my $script_file = $node->basedir . '/020_many_clients.sql';
PostgreSQL::Test::Utils::append_to_file($script_file, $script);
my ($out, $err) = ('', '');
my $start = time();
my $ran;
{
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	$ran = IPC::Run::run(
		[
			'pgbench', '--no-vacuum', "--client=$clients", '--jobs=2',
			"--time=$seconds", '--failures-detailed', '--verbose-errors',
			'--file', $script_file, 'postgres'
		],
		'>', \$out, '2>', \$err);
}
ok($ran, "pgbench with $clients clients for $seconds s exits with status 0");
is($err, '', 'no client error (deadlock, lock timeout, ...)');
like($out, qr/number of transactions actually processed: [1-9]/, 'transactions were processed');
# Deadlocks and serialization failures do not abort a pgbench client; they
# are counted (and, with --verbose-errors, reported on stderr).
like($out, qr/number of failed transactions: 0 /, 'no transaction failed (no deadlock, no serialization failure)');
note sprintf('pgbench ran for %d s', time() - $start);
note $_ for grep { /processed|failed|latency|tps/ } split /\n/, $out;
note "pgbench stderr: $err" if $err ne '';

# Enough happened for the checks to mean something.
my ($grants, $keys, $released, $expired) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*), count(DISTINCT lease_key),
	       count(*) FILTER (WHERE end_reason = 'released'),
	       count(*) FILTER (WHERE end_reason = 'expired')
	  FROM le_lease_history});
note "grants: $grants, released: $released, expired and taken over: $expired";
cmp_ok($grants, '>=', 30, 'at least 30 ownership periods granted');
is($keys, 3, 'all three keys were granted');
cmp_ok($released, '>', 0, 'some periods ended by release');
cmp_ok($expired, '>', 0, 'some periods lapsed and were taken over');

# Per key, in the order of acquired_at: tokens strictly rise and each period
# began no earlier than the previous one ended (which must have ended).
is( $node->safe_psql('postgres', q{
	SELECT coalesce(string_agg(format('%s: token %s after %s, acquired %s, previous ended %s',
	                                  lease_key, fencing_token, prev_token, acquired_at, prev_ended), E'\n'), '')
	  FROM (SELECT lease_key, fencing_token, acquired_at,
	               lag(fencing_token) OVER w AS prev_token,
	               lag(acquired_at) OVER w AS prev_acquired,
	               lag(ended_at) OVER w AS prev_ended,
	               row_number() OVER w AS n
	          FROM le_lease_history
	        WINDOW w AS (PARTITION BY lease_key ORDER BY acquired_at, history_id)) s
	 WHERE n > 1
	   AND (fencing_token <= prev_token OR acquired_at <= prev_acquired
	        OR prev_ended IS NULL OR acquired_at < prev_ended)}),
	'',
	'per key, tokens strictly increase with acquired_at and periods never overlap');

# Tokens come from one sequence for all keys: no token appears twice in the
# whole history, whatever the key.
is( $node->safe_psql('postgres', q{
	SELECT count(*) - count(DISTINCT fencing_token) FROM le_lease_history}),
	'0',
	'no token was issued twice, on any key');

# At most one period per key is still open, and it is the latest one.
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT lease_key FROM le_lease_history GROUP BY lease_key
	  HAVING count(*) FILTER (WHERE ended_at IS NULL) > 1) s}),
	'0',
	'at most one open ownership period per key');

# The lease rows agree with the history: current token = largest issued,
# transitions = number of periods, holder = the open period's holder.
is( $node->safe_psql('postgres', q{
	SELECT count(*)
	  FROM le_lease l
	  JOIN (SELECT lease_key, max(fencing_token) AS max_token, count(*) AS periods
	          FROM le_lease_history GROUP BY lease_key) h USING (lease_key)
	  LEFT JOIN le_lease_history o
	    ON o.lease_key = l.lease_key AND o.ended_at IS NULL
	 WHERE l.fencing_token <> h.max_token OR l.transitions <> h.periods
	    OR l.holder IS DISTINCT FROM o.holder}),
	'0',
	'final le_lease token equals the largest history token, per key');

$node->stop;
done_testing();
