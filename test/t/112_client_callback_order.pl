# Callbacks come from one place, in order: two electors in
# one process on one key with fast periods (ttl 400 ms) resign at random
# for a few seconds while their on_renewed callbacks are slow (up to 40 ms,
# like logging to a full pipe).  test/c/le_probe.c checks per elector that
# no two callbacks run at once, that on_started(N) comes only after
# on_stopped(N-1), and that on_renewed(N)/on_stopped(N) come only within
# period N.  (Before the dispatcher thread, callbacks ran on two threads
# and this failed.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my $cc = `sh -c 'command -v cc'`;
plan skip_all => 'no C compiler' unless $cc;

my ($node, $dsn, $dir) = start_node('client_order');
my ($ok, $err) = build_probe("$dir/le_probe");
my $out;
ok($ok, 'the probe program builds against the library') or diag($err);

IPC::Run::run([ "$dir/le_probe", 'order', $dsn, 'order-key', '6' ],
	'>', \$out, '2>', \$err, IPC::Run::timeout(120));
note($out);
like($out, qr/^order ok$/m, 'callbacks in order, one at a time, for every period');
unlike($out, qr/^problem/m, 'no problem reported');
my ($pa, $pb) = $out =~ /periods (\d+) (\d+)/;
cmp_ok(($pa // 0) + ($pb // 0), '>=', 10, 'with enough periods to mean something');

$node->stop;
done_testing();
