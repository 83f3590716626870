# G14, G5: the real prometheus-postgres-exporter, given
# monitoring/queries.yaml and a role with le_grant(role, 'monitor') only,
# serves the exact figures of a scripted scenario: periods granted,
# expiries and force releases per lease, the current token and holder, the
# renewal margin the server saw, and the writes the fence refused per table
# (counted in shared memory: the module is in shared_preload_libraries),
# which survive the rollback of the refused transactions.  The module works
# with the 1.0 table, and the update counts what the history holds.  The rule files
# of monitoring/ pass promtool check rules and promtool test rules.
use strict;
use warnings;

use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $exporter = '/usr/bin/prometheus-postgres-exporter';
my $promtool = '/usr/bin/promtool';
# The suite installs both: missing, they fail this test rather than skip it.
for my $bin ($exporter, $promtool)
{
	ok(-x $bin, "$bin is installed") or die "$bin is missing: install prometheus-postgres-exporter and prometheus";
}

my $monitoring = "$FindBin::Bin/../../monitoring";

# The rules first: they need no server.
my ($out, $err);
ok(IPC::Run::run([ $promtool, 'check', 'rules', "$monitoring/alerts.yml" ], '>', \$out, '2>', \$err),
	'promtool check rules accepts monitoring/alerts.yml') or diag("$out$err");
like($out, qr/SUCCESS: 5 rules found/, 'five alerting rules');
ok(IPC::Run::run([ $promtool, 'test', 'rules', "$monitoring/alerts_test.yml" ], '>', \$out, '2>', \$err),
	'promtool test rules: every alert fires and stays silent as expected') or diag("$out$err");

my $node = le_node('exporter', conf => "shared_preload_libraries = 'leader_election'\n");
sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{CREATE ROLE le_exporter LOGIN;
      SELECT le_grant('le_exporter', 'monitor');
      CREATE TABLE ledger (id int, fencing_token bigint NOT NULL);
      SELECT le_protect('ledger', 'flaky');
      CREATE TABLE quiet (id int, fencing_token bigint NOT NULL);
      SELECT le_protect('quiet', 'orders');});
is(sql('SELECT le_fence_refusals_counted()'), 't', 'preloaded: refused writes are counted');

# The scenario.  orders: granted, renewed once.  flaky: granted for 1 s,
# lapsed, taken over (an expiry).  spare: granted and force-released.
my $orders = sql(q{SELECT fencing_token FROM le_acquire('orders', 'node-a', '30 seconds')});
sql(qq{SELECT le_renew('orders', 'node-a', $orders, '30 seconds')});
my $flaky1 = sql(q{SELECT fencing_token FROM le_acquire('flaky', 'node-a', '1 second')});
sql(q{SELECT pg_sleep(1.2)});
my $flaky2 = sql(q{SELECT fencing_token FROM le_acquire('flaky', 'node-b', '30 seconds')});
sql(q{SELECT le_acquire('spare', 'node-c', '30 seconds'); SELECT le_force_release('spare')});
cmp_ok($flaky2, '>', $flaky1, 'the takeover got a higher token');

# Refused writes: two in ledger by the former holder of flaky (stale token),
# one through le_fence_check (no table); each rolls its transaction back.
for my $i (1 .. 2)
{
	my ($rc, $o, $e) = $node->psql('postgres', "INSERT INTO ledger VALUES ($i, $flaky1)");
	like($e, qr/is stale/, "stale write $i refused");
}
my ($rc, $o, $e) = $node->psql('postgres', "SELECT le_fence_check('flaky', $flaky1)");
like($e, qr/is stale/, 'stale le_fence_check refused');
is(sql('SELECT count(*) FROM ledger'), '0', 'nothing of the refused writes committed');

my $margin = sql(q{SELECT renew_margin_seconds FROM le_lease_metrics WHERE lease_key = 'orders'});

# A free port on the loopback interface for the exporter.
my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp', Listen => 1)
  or die "no free port: $!";
my $port = $sock->sockport;
close $sock;

local $ENV{DATA_SOURCE_NAME} =
  'host=' . $node->host . ' port=' . $node->port . ' user=le_exporter dbname=postgres sslmode=disable';
my ($xout, $xerr) = ('', '');
my $h = IPC::Run::start(
	[
		$exporter, "--extend.query-path=$monitoring/queries.yaml",
		"--web.listen-address=127.0.0.1:$port", '--disable-default-metrics',
		'--disable-settings-metrics', '--no-collector.database', '--no-collector.bgwriter',
		'--log.level=warn'
	],
	'>', \$xout, '2>', \$xerr);

# Scrape until the leader_election series are there (the exporter starts),
# for at most the harness's timeout.
my $http = HTTP::Tiny->new(timeout => 5);
my $body = '';
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline)
{
	my $res = $http->get("http://127.0.0.1:$port/metrics");
	if ($res->{success} && $res->{content} =~ /^leader_election_fence_refusal_counting/m)
	{
		$body = $res->{content};
		last;
	}
	select(undef, undef, undef, 0.1);
}
$h->kill_kill;
$h->finish;
ok($body ne '', 'the exporter served leader_election metrics') or diag($xerr);

# Every sample as name => [ { labels }, value ].
my %samples;
for my $line (split /\n/, $body)
{
	next if $line =~ /^#/;
	next unless $line =~ /^(\w+)(?:\{(.*)\})?\s+(\S+)$/;
	my ($name, $labels, $value) = ($1, $2 // '', $3);
	my %l = $labels =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
	push @{ $samples{$name} }, [ \%l, $value ];
}

# The value of the one sample of name whose labels include %want.
sub sample
{
	my ($name, %want) = @_;
	my @found = grep {
		my $l = $_->[0];
		!grep { !defined $l->{$_} || $l->{$_} ne $want{$_} } keys %want
	} @{ $samples{$name} // [] };
	return @found == 1 ? $found[0][1] : "(" . scalar(@found) . " samples)";
}

is(sample('leader_election_lease_periods_granted', lease_key => 'orders'), 1, 'orders: one period');
is(sample('leader_election_lease_periods_granted', lease_key => 'flaky'),  2, 'flaky: two periods');
is(sample('leader_election_lease_expiries',        lease_key => 'flaky'),  1, 'flaky: one expiry');
is(sample('leader_election_lease_expiries',        lease_key => 'orders'), 0, 'orders: no expiry');
is(sample('leader_election_lease_force_releases',  lease_key => 'spare'),  1, 'spare: one force release');
is(sample('leader_election_lease_force_releases',  lease_key => 'flaky'),  0, 'flaky: no force release');
is(sample('leader_election_lease_fencing_token',   lease_key => 'flaky'),  $flaky2, 'flaky: the current token');
is(sample('leader_election_lease_valid',           lease_key => 'orders'), 1, 'orders: valid');
is(sample('leader_election_lease_valid',           lease_key => 'spare'),  0, 'spare: not valid');
is(sample('leader_election_lease_ttl_seconds',     lease_key => 'orders'), 30, 'orders: ttl 30 s');
cmp_ok(abs(sample('leader_election_lease_renew_margin_seconds', lease_key => 'orders') - $margin),
	'<', 1e-6, "orders: the renewal margin the server saw ($margin s)");
is(sample('leader_election_lease_renew_margin_seconds', lease_key => 'flaky'), 'NaN',
	'flaky: no renewal in this period');
is(sample('leader_election_leader_info', lease_key => 'flaky', holder => 'node-b', holder_role => 'postgres'),
	1, 'flaky: led by node-b');
is(scalar(grep { $_->[0]{lease_key} eq 'spare' } @{ $samples{leader_election_leader_info} // [] }),
	0, 'spare: no leader');
is(sample('leader_election_fence_refusals_refused_writes', relation => 'ledger'), 2,
	'two refused writes in ledger');
is(sample('leader_election_fence_refusals_refused_writes', relation => '(no table)', relid => '0'), 1,
	'one refused le_fence_check');
my $ledger_oid = sql(q{SELECT 'ledger'::regclass::oid});
is(sample('leader_election_fence_refusals_refused_writes', relation => 'ledger', relid => $ledger_oid), 2,
	'the refusals of ledger carry its oid');
is(sample('leader_election_fence_refusals_refused_writes', relation => 'quiet'), 0,
	'a protected table without refusals is shown at 0');
is(sample('leader_election_fence_refusals_refused_writes', relid => 'overflow'), 0,
	'no overflow, shown at 0');
is(sample('leader_election_fence_refusal_counting'), 1, 'refusal counting is on');

# The module with a 1.0 table (no metric columns, before ALTER EXTENSION
# UPDATE): the lease calls work; the update counts the expiry the history
# recorded, and later calls count on.
sql(q{CREATE DATABASE old});
$node->safe_psql('old', q{CREATE EXTENSION leader_election VERSION '1.0';
	SELECT le_acquire('k', 'a', '1 second'); SELECT pg_sleep(1.1);
	SELECT le_acquire('k', 'b', '30 seconds');
	SELECT le_renew('k', 'b', fencing_token, '30 seconds') FROM le_leases;});
is($node->safe_psql('old', q{SELECT holder, transitions FROM le_leases}), 'b|2',
	'1.0 table: grants and renewals work');
$node->safe_psql('old', q{ALTER EXTENSION leader_election UPDATE;
	SELECT le_force_release('k');});
is($node->safe_psql('old',
		q{SELECT periods_granted, expiries, force_releases FROM le_lease_metrics}),
	'2|1|1', 'updated: the recorded expiry counted, the force release after it too');

# The counters are the server's: a restart starts them again, while the
# counts of the lease row stay.
$node->restart;
is(sql('SELECT count(*) FROM le_fence_refusals'), '0', 'a restart starts the refusal counts afresh');
is(sql(q{SELECT expiries FROM le_lease_metrics WHERE lease_key = 'flaky'}), '1',
	'the expiry count outlives the restart');

$node->stop;
done_testing();
