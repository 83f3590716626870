# G1, G3, G5, G9: short fault-injection run (the long form: test/run.sh chaos
# --minutes N): pg_leader candidates on two keys and plain SQL clients that
# hold transactions open across their fenced writes on a third, with short
# ttls, under random SIGSTOP/SIGCONT, SIGKILL of candidates and commands,
# pg_terminate_backend and immediate server restarts
# (test/chaos/chaos.py).  Its checker reads the history, the fenced rows'
# commit timestamps, the clients' logs and the server log; one assertion
# per invariant it printed.
#
# CHAOS_SECONDS (default 50) sets the duration of the fault loop,
# CHAOS_SEED the seed (printed either way).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;

my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
my $bindir = `pg_config --bindir`;
chomp $bindir;
my $dir = PostgreSQL::Test::Utils::tempdir_short() . '/chaos';
my $seconds = $ENV{CHAOS_SECONDS} // 50;

my @cmd = ($python, "$FindBin::Bin/../chaos/chaos.py", '--bindir', $bindir,
	'--dir', $dir, '--port', PostgreSQL::Test::Cluster::get_free_port(), '--seconds', $seconds,
	# 3 s of liveness slack (the long form keeps 2 s): this short form runs
	# inside the full suite, on CI machines busy with other work.
	'--liveness-bound', 3);
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(\@cmd, '>', \$out, '2>', \$err);
note $out;
diag $err if $err ne '';
my ($seed) = $out =~ /seed (\d+)/;
ok(defined $seed, 'the chaos run started and printed its seed');
$seed //= '?';

my $checks = 0;
while ($out =~ /^\s+(\d+)  (\S.*)$/mg)
{
	$checks++;
	is($1, 0, "$2 (seed $seed)");
}
cmp_ok($checks, '>=', 12, 'the checker printed all its invariants');

# The run did what it is for: faults of every kind that matters, takeovers, writes.
my ($faults) = $out =~ /^faults injected: (\d+)/m;
cmp_ok($faults // 0, '>=', 10, 'at least 10 faults were injected');
like($out, qr/^  stop_leader/m, 'leaders were frozen');
my ($periods) = $out =~ /^  ownership periods \(history\)\s+(\d+)/m;
cmp_ok($periods // 0, '>=', 10, 'leadership changed hands many times');
my ($rows) = $out =~ /^  fenced rows committed\s+(\d+)/m;
cmp_ok($rows // 0, '>=', 200, 'many fenced rows were committed');
ok($ok, "chaos.py exited 0 (seed $seed)");

done_testing();
