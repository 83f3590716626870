# Short fault-injection run of partition groups (the long form: test/run.sh
# groups-fault --minutes N): four pg_leader group run members share 64
# partitions of a table fenced per partition, each instance writing fenced
# rows, while members join, leave, are frozen past their ttl, are killed
# and restarted, and the server restarts (test/chaos/groups_fault.py).  Its
# checker reads the history, the rows' commit timestamps and the
# instances' logs; one assertion per invariant it printed.
#
# GROUPS_SECONDS (default 45) sets the duration of the fault loop,
# GROUPS_SEED the seed (printed either way).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;

my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
my $bindir = `pg_config --bindir`;
chomp $bindir;
my $dir = PostgreSQL::Test::Utils::tempdir_short() . '/groups';
my $seconds = $ENV{GROUPS_SECONDS} // 45;

my @cmd = ($python, "$FindBin::Bin/../chaos/groups_fault.py", '--bindir', $bindir,
	'--dir', $dir, '--port', PostgreSQL::Test::Cluster::get_free_port(), '--seconds', $seconds);
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(\@cmd, '>', \$out, '2>', \$err);
note $out;
diag $err if $err ne '';
my ($seed) = $out =~ /seed (\d+)/;
ok(defined $seed, 'the run started and printed its seed');
$seed //= '?';

my $checks = 0;
while ($out =~ /^\s+(\d+)  (\(\w.*)$/mg)
{
	$checks++;
	is($1, 0, "$2 (seed $seed)");
}
cmp_ok($checks, '>=', 13, 'the checker printed all its invariants');

# The run did what it is for: faults of every kind, moves, writes.
my ($faults) = $out =~ /^faults injected: (\d+)/m;
cmp_ok($faults // 0, '>=', 5, 'at least 5 faults were injected');
for my $kind (qw(join leave stop kill restart))
{
	like($out, qr/^  $kind\s+\d+$/m, "faults of kind $kind");
}
like($out, qr/^  (join|resume)\s+n=\d+/m, 'a member joined and the group converged');
my ($rows) = $out =~ /^  fenced rows committed\s+(\d+)/m;
cmp_ok($rows // 0, '>=', 1000, 'many fenced rows were committed');
ok($ok, "groups_fault.py exited 0 (seed $seed)");

done_testing();
